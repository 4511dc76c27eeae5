"""What ``minipaged tui --serve`` may run at once, and what each session costs: one figure
each, read by the server, its flags' help and the teaching guide's sizing of a class."""

TAB_MB = 349
"""One tab's app with the tiny model, resident, after ten steps of the tour: measured once,
with two tabs open (the two share some pages, 290 MB each counted proportionally)."""

DEFAULT_MAX_SESSIONS = 8
"""Apps served at once: each is a process of about ``TAB_MB`` MB."""
