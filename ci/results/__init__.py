"""Reading what a run produced: JUnit reports, per-file summaries, recorded durations."""
