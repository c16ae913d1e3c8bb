"""Generation figures: the live gauge, the off-vs-on comparison window and the short texts they
share."""
