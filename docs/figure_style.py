"""What every figure of the site shares: its width, text size and colours (docs/figures.py)."""

WIDTH_IN = 5.0
STYLE = {
    "font.size": 11,
    "axes.titlesize": 11,
    "svg.hashsalt": "minipaged",  # stable element ids, so the files do not change run to run
    "svg.fonttype": "path",  # no font is needed to view them
    "axes.spines.top": False,
    "axes.spines.right": False,
}
USED, RESERVED, FREE, SHARED = "#3b6ea8", "#e8a33d", "#e6e6e6", "#7aa66b"
# One colour per sequence where a figure tells sequences apart.
SEQUENCES = ["#3b6ea8", "#c0504d", "#7aa66b", "#8064a2", "#4bacc6", "#f79646"]
