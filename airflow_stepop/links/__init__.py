"""Extra links to a step's job, persisted before the task defers."""
