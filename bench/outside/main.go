// Command outside is the outside pass's harness: agents that make every
// failure the spec lists against MCP servers of both dialects that behave
// like the reference servers, seen by mcpaudit through real clients (the
// OpenTelemetry SDK's exporters, the official go-sdk through `mcpaudit
// proxy` and `mcpaudit wrap`), and the checks of what serve made of them.
// bench/outside/run.sh runs the whole pass; docs/benchmarks.md ("out48")
// has its figures. It is a main package without tests: `go test` builds it
// and runs nothing.
//
//	outside server  -dialect thegram|oddlynew (-listen ADDR | -stdio)
//	outside traffic -grpc ADDR -http ADDR [-proxy-thegram URL -proxy-oddlynew URL] [-wrap CMD] -out DIR
//	outside tail    -in calls.ndjson -out tail.ndjson
//	outside check   -dir DIR -api URL -prom URL
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: outside server|traffic|tail|check [flags]")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "server":
		err = serverCmd(os.Args[2:])
	case "traffic":
		err = trafficCmd(os.Args[2:])
	case "tail":
		err = tailCmd(os.Args[2:])
	case "check":
		err = checkCmd(os.Args[2:])
	default:
		err = fmt.Errorf("unknown command %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "outside:", err)
		os.Exit(1)
	}
}

func serverCmd(args []string) error {
	fs := flag.NewFlagSet("server", flag.ExitOnError)
	dialect := fs.String("dialect", "thegram", "thegram or oddlynew")
	listen := fs.String("listen", "", "serve Streamable HTTP on this address (path /mcp)")
	stdio := fs.Bool("stdio", false, "serve one session on stdin and stdout")
	slow := fs.Duration("slow", 8*time.Second, "how long a no-answer fault holds its answer")
	fs.Parse(args)
	f := newFakeServer(*dialect, *slow)
	if *stdio {
		return f.mcpServer().Run(context.Background(), &mcp.StdioTransport{})
	}
	s := f.mcpServer()
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil)
	mux := http.NewServeMux()
	mux.Handle("/mcp", h)
	return http.ListenAndServe(*listen, mux)
}

type scenario = struct {
	name string
	run  func(c *caller, u string)
}

func scenariosOf(dialect string) []scenario {
	if dialect == "thegram" {
		return thegramScenarios
	}
	return oddlynewScenarios
}

func trafficCmd(args []string) error {
	fs := flag.NewFlagSet("traffic", flag.ExitOnError)
	grpcAddr := fs.String("grpc", "", "serve's OTLP/gRPC address (empty: no OTel agents)")
	httpAddr := fs.String("http", "", "serve's OTLP/HTTP address host:port")
	proxyT := fs.String("proxy-thegram", "", "URL of `mcpaudit proxy` in front of a Thegram server (empty: none)")
	proxyO := fs.String("proxy-oddlynew", "", "URL of `mcpaudit proxy` in front of an Oddlynew server")
	wrap := fs.String("wrap", "", "command line running `mcpaudit wrap ... --`; DIALECT in it is replaced (empty: none)")
	rounds := fs.Int("rounds", 3, "rounds of every scenario per path and dialect")
	every := fs.Duration("every", 20*time.Second, "time between the starts of two rounds")
	lagBatch := fs.Duration("lag-batch", 25*time.Second, "batch timeout of the lagging provider")
	skew := fs.Duration("skew", -15*time.Second, "clock skew of the lagging provider")
	tag := fs.String("tag", "r1", "tag in server names and sessions")
	out := fs.String("out", ".", "directory for sent.ndjson and spans.ndjson")
	fs.Parse(args)
	ctx := context.Background()
	log := &sentLog{}
	var wg sync.WaitGroup
	var provs []*provider
	for _, d := range []string{"thegram", "oddlynew"} {
		dialect := d
		if *grpcAddr != "" {
			server := dialect + "-otel-" + *tag
			ps, err := newProviders(ctx, server, *grpcAddr, *httpAddr, *lagBatch, *skew)
			if err != nil {
				return err
			}
			provs = append(provs, ps...)
			fake := newFakeServer(dialect, 5*time.Second)
			srv := fake.mcpServer()
			wg.Add(1)
			go func() {
				defer wg.Done()
				rounds_(*rounds, *every, func(r int) {
					for i, sc := range scenariosOf(dialect) {
						p := ps[(i+r)%3]
						session := fmt.Sprintf("s-%s-%s-%d-%02d", *tag, dialect[:1], r, i)
						ct, st := mcp.NewInMemoryTransports()
						ss, err := srv.Connect(ctx, st, nil)
						if err != nil {
							fmt.Fprintln(os.Stderr, "server connect:", err)
							continue
						}
						cl := mcp.NewClient(&mcp.Implementation{Name: "outside-agent", Version: "0.1"}, nil)
						instrument(cl, p, server, session)
						cs, err := cl.Connect(ctx, ct, nil)
						if err != nil {
							fmt.Fprintln(os.Stderr, "client connect:", err)
							continue
						}
						c := &caller{cs: cs, server: server, session: session, path: "otel", deadline: 3 * time.Second, pause: 300 * time.Millisecond, log: log.add}
						sc.run(c, fmt.Sprintf("%s%d%02d", *tag, r, i))
						cs.Close()
						ss.Close()
					}
				})
			}()
		}
		url := map[string]string{"thegram": *proxyT, "oddlynew": *proxyO}[dialect]
		if url != "" {
			server := dialect + "-proxy-" + *tag
			wg.Add(1)
			go func() {
				defer wg.Done()
				rounds_(*rounds, *every, func(r int) {
					for i, sc := range scenariosOf(dialect) {
						cl := mcp.NewClient(&mcp.Implementation{Name: "outside-agent", Version: "0.1"}, nil)
						cs, err := cl.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url}, nil)
						if err != nil {
							fmt.Fprintln(os.Stderr, "proxy connect:", err)
							continue
						}
						c := &caller{cs: cs, server: server, session: cs.ID(), path: "proxy", deadline: 6 * time.Second, pause: 300 * time.Millisecond, log: log.add}
						sc.run(c, fmt.Sprintf("%sp%d%02d", *tag, r, i))
						cs.Close()
					}
				})
			}()
		}
		if *wrap != "" {
			server := dialect + "-wrap-" + *tag
			line := strings.ReplaceAll(strings.ReplaceAll(*wrap, "DIALECT", dialect), "SERVER", server)
			wg.Add(1)
			go func() {
				defer wg.Done()
				rounds_(*rounds, *every, func(r int) {
					argv := strings.Fields(line)
					cl := mcp.NewClient(&mcp.Implementation{Name: "outside-agent", Version: "0.1"}, nil)
					cs, err := cl.Connect(ctx, &mcp.CommandTransport{Command: exec.Command(argv[0], argv[1:]...)}, nil)
					if err != nil {
						fmt.Fprintln(os.Stderr, "wrap connect:", err)
						return
					}
					for i, sc := range scenariosOf(dialect) {
						c := &caller{cs: cs, server: server, session: "", path: "wrap", deadline: 3 * time.Second, pause: 300 * time.Millisecond, log: log.add}
						sc.run(c, fmt.Sprintf("%sw%d%02d", *tag, r, i))
					}
					cs.Close()
				})
			}()
		}
	}
	wg.Wait()
	for _, p := range provs {
		sctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		if err := p.tp.Shutdown(sctx); err != nil {
			fmt.Fprintln(os.Stderr, "shutdown", p.name, err)
		}
		cancel()
	}
	if err := writeLines(filepath.Join(*out, "sent.ndjson"), log.all); err != nil {
		return err
	}
	var acked, failed []spanRef
	for _, p := range provs {
		acked = append(acked, p.exp.acked...)
		failed = append(failed, p.exp.failed...)
		fmt.Fprintf(os.Stderr, "%s: %d batches (%d refused), %d spans acknowledged, %d not\n", p.name, p.exp.batches.Load(), p.exp.errBatchs.Load(), len(p.exp.acked), len(p.exp.failed))
	}
	if err := writeLines(filepath.Join(*out, "spans.ndjson"), acked); err != nil {
		return err
	}
	if err := writeLines(filepath.Join(*out, "spans-failed.ndjson"), failed); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "%d tool calls made, %d spans acknowledged, %d refused\n", len(log.all), len(acked), len(failed))
	return nil
}

// rounds_ runs f(0..n-1), one round every `every`, rounds overlapping when
// one takes longer.
func rounds_(n int, every time.Duration, f func(r int)) {
	var wg sync.WaitGroup
	for r := 0; r < n; r++ {
		wg.Add(1)
		go func(r int) { defer wg.Done(); f(r) }(r)
		if r < n-1 {
			time.Sleep(every)
		}
	}
	wg.Wait()
}

func writeLines[T any](path string, xs []T) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	enc := json.NewEncoder(f)
	for _, x := range xs {
		if err := enc.Encode(x); err != nil {
			f.Close()
			return err
		}
	}
	return f.Close()
}
