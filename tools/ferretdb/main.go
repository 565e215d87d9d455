// Command ferretdb runs FerretDB, embedded as a library with its SQLite backend, on one loopback
// TCP address: the Mongo-wire-protocol server behind `fanout stack up --edge-store mongodb` and the
// test session's Mongo edge-store tests.
//
// It is built from the library package (github.com/FerretDB/FerretDB/ferretdb) rather than with
// `go install .../cmd/ferretdb`: the command reads generated version files that a module download
// lacks and panics at start. The library needs none of them; this program reports the FerretDB
// module version it was built with (from the binary's build info) in place of the "unknown" the
// library would report, so `buildInfo` names the server a test ran against.
//
// Usage: ferretdb -listen 127.0.0.1:PORT -data-dir DIR   (runs until SIGINT/SIGTERM)
//
//	ferretdb -version                                (prints the FerretDB version, exits)
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"syscall"

	"github.com/FerretDB/FerretDB/build/version"
	"github.com/FerretDB/FerretDB/ferretdb"
)

const modulePath = "github.com/FerretDB/FerretDB"

// moduleVersion is the FerretDB module version compiled into this binary, e.g. "v1.24.2".
func moduleVersion() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	for _, dep := range info.Deps {
		if dep.Path == modulePath {
			if dep.Replace != nil {
				return dep.Replace.Version
			}
			return dep.Version
		}
	}
	return "unknown"
}

func run() error {
	listen := flag.String("listen", "", "loopback TCP address to listen on, host:port")
	dataDir := flag.String("data-dir", "", "directory holding the SQLite databases (created if absent)")
	logLevel := flag.String("log-level", "warn", "debug, info, warn or error")
	printVersion := flag.Bool("version", false, "print the FerretDB version and exit")
	flag.Parse()

	if *printVersion {
		fmt.Println("FerretDB " + moduleVersion())
		return nil
	}
	if *listen == "" || *dataDir == "" {
		return errors.New("-listen and -data-dir are required")
	}
	host, _, err := net.SplitHostPort(*listen)
	if err != nil {
		return fmt.Errorf("-listen: %w", err)
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("-listen: %q is not a loopback address", host)
	}

	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		return fmt.Errorf("-log-level: %w", err)
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))

	dir, err := filepath.Abs(*dataDir)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}

	version.Get().Version = moduleVersion()

	f, err := ferretdb.New(&ferretdb.Config{
		Listener:  ferretdb.ListenerConfig{TCP: *listen},
		Logger:    logger,
		Handler:   "sqlite",
		SQLiteURL: "file:" + dir + "/",
	})
	if err != nil {
		return err
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	return f.Run(ctx)
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "ferretdb:", err)
		os.Exit(1)
	}
}
