"""Before a server starts: the checks (`checks`, run by `preflight`) and how a group keeps its members
(`residency`), asking each backend's machine part (`machine`)."""
