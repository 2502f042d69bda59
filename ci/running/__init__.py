"""Running a tier's tests through pytest on a machine that fits the tier."""
