"""The one trigger, generic over backends."""
