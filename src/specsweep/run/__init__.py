"""Running a group: the one loop (`runner`), the looks of `repeats: auto` (`looks`), a server process's lifecycle
(`server`), the request client (`client`) and one bench cell's bookkeeping (`bench_cell`)."""
