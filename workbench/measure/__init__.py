"""measure stage."""
