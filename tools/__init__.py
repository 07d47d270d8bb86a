"""Tools around the program: offline plan, mocks, Pulumi.yaml generation, snapshots, watch.

They import the layers below (catalog, components, stacks) and are imported by nothing but tests.
"""
