// SPDX-License-Identifier: Apache-2.0

// rdmagw-k8s watches the Kubernetes API for Services and their endpoints and
// writes them to a file that the rdmagw sidecars of its node read
// (docs/kubernetes.md). One runs per node (a DaemonSet).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// The project's version (CMakeLists.txt, project(... VERSION)).
const version = "0.1.0"

const usage = `rdmagw-k8s: feeds rdmagw sidecars the Kubernetes Services and their endpoints

  rdmagw-k8s [--kubeconfig FILE] --output FILE [--table FILE]
        watch, and rewrite FILE (JSON; and the table) when what it holds changes
  rdmagw-k8s [--kubeconfig FILE] --once
        print the file it would write (JSON) and exit
  rdmagw-k8s --table-from FILE --table FILE
        write a services file (JSON) as a table, and exit

Sidecars read either (services.file): the table is mapped, not parsed, so its
pages are shared by every sidecar of the node and a change costs each one a
check, not a parse and a copy.

Inside a pod it uses the pod's service account (docs/kubernetes.md lists the
RBAC it needs); elsewhere --kubeconfig, else $KUBECONFIG.

Exit status: 0 done (or stopped by SIGTERM/SIGINT), 1 the API server could not
be listed within --sync-timeout or a file could not be read or written, 2 a bad
command line.

Options:
`

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	flags := flag.NewFlagSet("rdmagw-k8s", flag.ContinueOnError)
	flags.Usage = func() {
		fmt.Fprint(flags.Output(), usage)
		flags.PrintDefaults()
	}
	kubeconfig := flags.String("kubeconfig", "", "a kubeconfig file (default: the pod's service account, else $KUBECONFIG)")
	output := flags.String("output", "", "the services file to write, replaced by rename (e.g. /run/rdmagw-k8s/services.json)")
	table := flags.String("table", "", "with --output: also write the services as a table there, which sidecars map instead of parsing (e.g. /run/rdmagw-k8s/services.table)")
	tableFrom := flags.String("table-from", "", "write --table from this services file (JSON) and exit: no API server")
	once := flags.Bool("once", false, "list once, print the file as JSON on standard output, exit")
	syncTimeout := flags.Duration("sync-timeout", 30*time.Second, "how long the first list may take")
	settle := flags.Duration("settle", 100*time.Millisecond, "how long to let a burst of changes land before writing")
	showVersion := flags.Bool("version", false, "print the version and exit")
	if err := flags.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if *showVersion {
		fmt.Printf("rdmagw-k8s %s\n", version)
		return 0
	}
	if flags.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "rdmagw-k8s: unexpected argument %q (see --help)\n", flags.Arg(0))
		return 2
	}
	if *tableFrom != "" {
		if *table == "" || *output != "" || *once {
			fmt.Fprintln(os.Stderr, "rdmagw-k8s: --table-from FILE takes --table FILE and nothing else (see --help)")
			return 2
		}
		return convertTable(*tableFrom, *table)
	}
	if *table != "" && *output == "" {
		fmt.Fprintln(os.Stderr, "rdmagw-k8s: --table FILE goes with --output FILE (or --table-from FILE)")
		return 2
	}
	if *once == (*output != "") {
		fmt.Fprintln(os.Stderr, "rdmagw-k8s: give exactly one of --output FILE and --once (see --help)")
		return 2
	}
	if *settle < 0 || *syncTimeout <= 0 {
		fmt.Fprintln(os.Stderr, "rdmagw-k8s: --settle must be >= 0 and --sync-timeout > 0")
		return 2
	}

	config, err := loadConfig(*kubeconfig)
	if err != nil {
		fmt.Fprintf(os.Stderr, "rdmagw-k8s: %v\n", err)
		return 2
	}
	config.UserAgent = "rdmagw-k8s/" + version

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	feed, err := NewFeed(config)
	if err != nil {
		fmt.Fprintf(os.Stderr, "rdmagw-k8s: %v\n", err)
		return 1
	}
	if err := feed.Start(ctx, *syncTimeout); err != nil {
		fmt.Fprintf(os.Stderr, "rdmagw-k8s: %s: %v\n", config.Host, err)
		return 1
	}
	if *once {
		data, err := json.MarshalIndent(feed.Build(), "", " ")
		if err != nil {
			fmt.Fprintf(os.Stderr, "rdmagw-k8s: %v\n", err)
			return 1
		}
		os.Stdout.Write(append(data, '\n'))
		return 0
	}
	logEvent("info", "started", "version", version, "api", config.Host, "output", *output, "table", *table)
	feed.wake() // the first file, even if nothing changes after the first list
	if err := feed.Run(ctx, *output, *table, *settle); err != nil {
		fmt.Fprintf(os.Stderr, "rdmagw-k8s: %v\n", err)
		return 1
	}
	logEvent("info", "stopped")
	return 0
}

// convertTable writes the services file at from as a table at to.
func convertTable(from, to string) int {
	data, err := os.ReadFile(from)
	if err != nil {
		fmt.Fprintf(os.Stderr, "rdmagw-k8s: %v\n", err)
		return 1
	}
	var file File
	if err := json.Unmarshal(data, &file); err != nil {
		fmt.Fprintf(os.Stderr, "rdmagw-k8s: %s: %v\n", from, err)
		return 1
	}
	if file.Format != FileFormat {
		fmt.Fprintf(os.Stderr, "rdmagw-k8s: %s: format %q, not %q\n", from, file.Format, FileFormat)
		return 1
	}
	if err := writeTable(to, file); err != nil {
		fmt.Fprintf(os.Stderr, "rdmagw-k8s: %s: %v\n", to, err)
		return 1
	}
	return 0
}

func loadConfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig == "" && os.Getenv("KUBECONFIG") == "" {
		if config, err := rest.InClusterConfig(); err == nil {
			return config, nil
		}
		return nil, errors.New("not in a pod (no service account) and neither --kubeconfig nor $KUBECONFIG is set")
	}
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if kubeconfig != "" {
		rules.ExplicitPath = kubeconfig
	}
	config, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("kubeconfig: %w", err)
	}
	return config, nil
}
