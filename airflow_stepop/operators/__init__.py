"""Step operators: a generic base and one thin subclass per service."""
