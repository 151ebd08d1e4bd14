"""TaskFlow decorators: ``@task.local_step`` and one per service."""
