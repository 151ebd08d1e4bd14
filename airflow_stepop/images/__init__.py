"""DockerSettings -> an environment image in a registry, built only when its content changes."""
