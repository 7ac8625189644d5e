"""Language models: the embedded model packages, chat generators, constrained decoding, the logits probe, prompts."""
