"""frontends stage."""
