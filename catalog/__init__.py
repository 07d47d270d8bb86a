"""The catalog: facts and pure functions, no Pulumi import.

Everything that varies per machine, model, capacity type or platform rule lives here, once, with
its source. Components and the program import it; it imports nothing of the project above it.
"""
