"""Generation figures: the live gauge, the off-vs-on comparison window, the benchmark chart and
the short texts they share."""
