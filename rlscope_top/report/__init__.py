"""Report: the summary document, its text, the comparison and the screen's view model."""
