"""fusion stage."""
