"""One ComponentResource per concern, plus the Ray job dynamic provider."""
