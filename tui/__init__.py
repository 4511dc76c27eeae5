"""The Textual step-through visualizer: block tables, refcounts, copy-on-write splits and swaps,
shown live as the model generates, one step at a time, forward and back."""
