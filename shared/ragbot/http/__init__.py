"""What every HTTP service shares: the app factory with its lifespan and readiness."""
