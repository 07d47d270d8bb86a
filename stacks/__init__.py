"""Typed stack configuration, accelerator profiles, the GRPO recipe, composition and the offline plan."""
