"""Attention as serving engines run it, per variant: multi-head latent attention in the absorbed form, DeepSeek
sparse attention over its indexer's top-k, sliding and chunked windows by blocks, learned prompt tokens."""
