"""What a causal LM keeps between steps, per layer type (full, sliding, chunked, latent, indexed, recurrent
state): probed from a one-token forward on meta, held as engines store it, and the states that models keep
outside transformers' cache classes."""
