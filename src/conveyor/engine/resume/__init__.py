"""How each kind of data keeps, ships and resumes its place in an epoch."""
