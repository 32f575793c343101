"""brokkr's built-in plugins. Each registers exactly as a third-party plugin would."""
