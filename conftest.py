"""Root conftest: loads the suite's plugins, one module per concern."""

pytest_plugins = [
    "fixtures.plugin",
    "fixtures.signals",
    "fixtures.leases",
    "fixtures.node_client",
    "fixtures.sanity",
    "fixtures.console",
    "fixtures.certification",
    "reports.junit",
    "reports.html",
    "reports.skips",
]
