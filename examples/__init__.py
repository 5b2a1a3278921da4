"""Example projects: pipelines defined outside Rescaler's package, as a user's would be."""
