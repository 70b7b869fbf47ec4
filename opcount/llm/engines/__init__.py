"""Serving engines' costs beyond the kernels: a profile's parameters (:mod:`.profile`) and the terms they add
to a deployed step's estimate (:mod:`.terms`)."""
