"""The HUD: one static page (and its JSON) of the state of CI, from the history store, the registry and the plan."""
