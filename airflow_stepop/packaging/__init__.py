"""Worker side: a task's callable becomes a content-addressed code bundle."""
