"""The HTTP edge: the app and its lifespan, who is calling (`caller`), request limits, the
managed routes (`chat`, `offload_api`), the relay of everything else, observability."""
