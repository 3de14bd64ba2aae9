module rdmagw.local/perf/goecho

go 1.19
