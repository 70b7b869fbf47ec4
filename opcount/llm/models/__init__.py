"""Which causal LM: published configs by name, local config files, the limits every size is held to, and the
model built on meta from its config."""
