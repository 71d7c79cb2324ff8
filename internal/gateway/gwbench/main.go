// Command gwbench measures the latency the LLM gateway adds. In one run it
// sends the same open-loop load — a fixed request rate for a fixed
// duration — directly to a local upstream stub and through a gyre server
// (SQLite store, file blobs, recording on) in front of that stub, for
// non-streaming and streaming calls of one protocol (-protocol: chat
// completions, OpenAI Responses or Anthropic Messages; the stub answers in
// that protocol's shape), and prints p50 and p99 latency for both paths,
// the latency the gateway added and the ratio.
//
// Run it with make bench-gateway, or:
//
//	go run ./internal/gateway/gwbench -rate 1000 -duration 10s -protocol responses
//
// Latency is measured from each request's scheduled send time (so a
// backlog counts) to the end of its answer: the whole body, or for a
// chat stream the [DONE] event, where the client closes the stream as
// openai-go does (its connection is reused only if the end of the body
// came with [DONE]; NEW_CONNS counts those that were not), and for a
// Responses or Messages stream the end of the body, which the SDKs read
// to, after its final event (response.completed, message_stop). gyre runs in a child process of its own, as
// gyre serve would (garbage collection at 4x the live heap unless GOGC is
// set, JSON access logs written to a file), so that its collector and the
// load generator's do not stall each other; the load generator and the
// stub share this process. -inprocess runs gyre in this process instead
// (for -cpuprofile of everything at once). All of it shares the
// machine's cores.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptrace"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gyrehq/gyre"
	"github.com/gyrehq/gyre/flywheel"
	"github.com/gyrehq/gyre/internal/api"
	"github.com/gyrehq/gyre/internal/auth"
	"github.com/gyrehq/gyre/internal/blobstore"
	"github.com/gyrehq/gyre/internal/clock"
	"github.com/gyrehq/gyre/internal/gateway"
	"github.com/gyrehq/gyre/internal/rollout"
	"github.com/gyrehq/gyre/internal/store"
	"github.com/gyrehq/gyre/internal/store/storeopen"
	"github.com/gyrehq/gyre/internal/telemetry"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "gwbench:", err)
		os.Exit(1)
	}
}

type options struct {
	rate     int
	duration time.Duration
	warmup   time.Duration
	chunks   int
	rollouts int
	cache    time.Duration
	flush    time.Duration
	batch    int
	asJSON   bool
	profile  string
	// inprocess runs gyre in this process; role "gyre" is the child
	// process serving gyre in front of upstream.
	inprocess bool
	// baseline adds a bare reverse proxy (net/http/httputil, flushing
	// every write) in a child process of its own, as the floor any proxy
	// in its own process pays on this machine.
	baseline bool
	role     string
	upstream string
	// protocol names the benchProtocol the load speaks.
	protocol string
}

func run() error {
	var o options
	flag.IntVar(&o.rate, "rate", 1000, "requests per second, per phase")
	flag.DurationVar(&o.duration, "duration", 10*time.Second, "measured duration of each phase")
	flag.DurationVar(&o.warmup, "warmup", 2*time.Second, "unmeasured load before each phase")
	flag.IntVar(&o.chunks, "chunks", 8, "content chunks per streamed answer")
	flag.IntVar(&o.rollouts, "rollouts", 4, "rollouts the gateway load is spread over")
	flag.DurationVar(&o.flush, "flush-interval", gateway.DefaultFlushInterval, "longest time a gateway record waits in memory before it is written")
	flag.IntVar(&o.batch, "flush-batch", gateway.DefaultFlushBatch, "records waiting that start a flush before the interval is up")
	flag.DurationVar(&o.cache, "grant-cache", gateway.DefaultGrantCacheTTL, "gateway credential cache TTL (negative: read the credential on every request)")
	flag.BoolVar(&o.asJSON, "json", false, "print the results as JSON")
	flag.StringVar(&o.profile, "cpuprofile", "", "write a CPU profile of gyre (of everything with -inprocess) to this file")
	flag.BoolVar(&o.inprocess, "inprocess", false, "run gyre in the load generator's process instead of a child process")
	flag.BoolVar(&o.baseline, "baseline", true, "also send the load through a bare reverse proxy in its own process (the floor of any proxy here)")
	flag.StringVar(&o.role, "role", "", "internal: \"gyre\" or \"proxy\" serves in front of -upstream for a parent gwbench")
	flag.StringVar(&o.upstream, "upstream", "", "internal: the stub's URL, for -role gyre")
	flag.StringVar(&o.protocol, "protocol", "chat", "the protocol of the load: chat, responses or messages")
	flag.Parse()
	if o.role == "gyre" {
		return serveChild(o)
	}
	if o.role == "proxy" {
		return serveProxy(o)
	}
	if o.role != "" {
		return fmt.Errorf("unknown -role %q", o.role)
	}
	if o.profile != "" && o.inprocess {
		stop, err := startProfile(o.profile)
		if err != nil {
			return err
		}
		defer stop()
	}
	if o.rate < 1 || o.duration <= 0 || o.rollouts < 1 {
		return errors.New("-rate, -duration and -rollouts must be positive")
	}
	proto, ok := benchProtocols(o.chunks)[o.protocol]
	if !ok {
		return fmt.Errorf("-protocol %q: want chat, responses or messages", o.protocol)
	}

	stub, err := startStub(o.chunks)
	if err != nil {
		return err
	}
	defer stub.Close()
	var srv benchTarget
	if o.inprocess {
		srv, err = startGyre(stub.url, o)
	} else {
		srv, err = startChild("gyre", stub.url, o)
	}
	if err != nil {
		return err
	}
	defer srv.Close()
	rollouts := srv.Rollouts()
	paths := []string{"direct", "gateway"}
	var (
		proxyURL string
		proxy    *child
	)
	if o.baseline {
		proxy, err = startChild("proxy", stub.url, o)
		if err != nil {
			return err
		}
		defer proxy.Close()
		proxyURL = proxy.Rollouts()[0].LLMURL
		paths = []string{"direct", "proxy", "gateway"}
	}

	client := &http.Client{Transport: &http.Transport{MaxIdleConns: 4096, MaxIdleConnsPerHost: 4096, IdleConnTimeout: time.Minute,
		DisableCompression: true}}
	load0 := loadavg()
	fmt.Fprintf(os.Stderr, "gwbench: %s, %d req/s for %s per phase (warm-up %s), GOMAXPROCS=%d, NumCPU=%d, load average %s\n",
		proto.name, o.rate, o.duration, o.warmup, runtime.GOMAXPROCS(0), runtime.NumCPU(), load0)

	var results []result
	for _, stream := range []bool{false, true} {
		for _, via := range paths {
			target := func(i int) (string, string) { return stub.url + "/v1" + proto.path, "" }
			if via == "proxy" {
				target = func(i int) (string, string) { return proxyURL + proto.path, "" }
			}
			if via == "gateway" {
				target = func(i int) (string, string) {
					rr := rollouts[i%len(rollouts)]
					return rr.LLMURL + proto.path, rr.APIKey
				}
			}
			fmt.Fprintf(os.Stderr, "gwbench: %s %s %s...\n", proto.name, mode(stream), via)
			if o.warmup > 0 {
				phase(client, proto, target, stream, o.rate, o.warmup)
			}
			dialled.Store(0)
			lat, first, fails := phase(client, proto, target, stream, o.rate, o.duration)
			r := summarize(mode(stream), via, lat, first, fails)
			r.NewConns = int(dialled.Load())
			results = append(results, r)
		}
	}
	load1 := loadavg()
	recorded, counted, err := srv.Records()
	if err != nil {
		return err
	}
	// CPU per request of each child: every request it served, warm-up
	// included, and for gyre its records' final flush.
	perPath := 2 * o.rate * int((o.warmup + o.duration).Seconds())
	cpu := map[string]float64{}
	if c, ok := srv.(*child); ok {
		cpu["gateway"] = c.done.CPUSeconds / float64(perPath)
	}
	if proxy != nil {
		done, err := proxy.finish()
		if err != nil {
			return err
		}
		cpu["proxy"] = done.CPUSeconds / float64(perPath)
	}
	return report(os.Stdout, o, results, load0, load1, recorded, counted, cpu)
}

// benchTarget is a gyre server with the gateway in front of the stub.
type benchTarget interface {
	// Rollouts are the leased rollouts the gateway load is spread over.
	Rollouts() []flywheel.RolloutRequest
	// Records flushes the gateway and counts the records written.
	Records() (recorded, counted int, err error)
	Close()
}

func (g *gyreServer) Rollouts() []flywheel.RolloutRequest { return g.rollouts }
func (g *gyreServer) Close()                              { g.close() }

func (g *gyreServer) Records() (recorded, counted int, err error) {
	// A client has its answer before the gateway has recorded it (a
	// stream's record waits for the write of its last bytes): stop serving,
	// then flush until no request is in flight and every record is durable.
	g.stopServing()
	for i := 0; ; i++ {
		if err := g.gw.Recorder().Flush(context.Background()); err != nil {
			return 0, 0, fmt.Errorf("final flush: %w", err)
		}
		if g.gw.Recorder().Idle() {
			break
		}
		if i == 2000 {
			return 0, 0, errors.New("final flush: the gateway still has requests in flight after 10s")
		}
		time.Sleep(5 * time.Millisecond)
	}
	for _, rr := range g.rollouts {
		calls, err := g.st.GatewayCalls(context.Background(), g.tenantID, rr.RolloutID)
		if err != nil {
			return 0, 0, err
		}
		recorded += len(calls)
		for _, c := range calls {
			if c.Counted {
				counted++
			}
		}
	}
	return recorded, counted, nil
}

// childReady is what the child writes once it serves; childDone what it
// writes after its stdin closes and its records are flushed.
type childReady struct {
	Rollouts []flywheel.RolloutRequest `json:"rollouts"`
}

type childDone struct {
	// CPUSeconds is the child's user and system CPU time over its life.
	CPUSeconds float64 `json:"cpu_seconds"`
	Recorded   int     `json:"recorded"`
	Counted    int     `json:"counted"`
	Error      string  `json:"error,omitempty"`
}

// serveChild is the child process: gyre in front of o.upstream, serving
// until stdin closes.
func serveChild(o options) error {
	collectAsServeDoes()
	if o.profile != "" {
		stop, err := startProfile(o.profile)
		if err != nil {
			return err
		}
		defer stop()
	}
	g, err := startGyre(o.upstream, o)
	if err != nil {
		return err
	}
	defer g.close()
	enc := json.NewEncoder(os.Stdout)
	if err := enc.Encode(childReady{Rollouts: g.rollouts}); err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, os.Stdin) // the parent closes it when done
	var done childDone
	done.Recorded, done.Counted, err = g.Records()
	if err != nil {
		done.Error = err.Error()
	}
	done.CPUSeconds = cpuSeconds()
	return enc.Encode(done)
}

// serveProxy is the baseline child: a bare proxy to o.upstream that
// forwards the request body and relays the answer, flushing after every
// read, with GC as gyre serve runs it, serving until stdin closes. It
// answers one pseudo-rollout whose llm_url is the proxy.
func serveProxy(o options) error {
	collectAsServeDoes()
	client := &http.Client{Transport: &http.Transport{MaxIdleConns: 4096, MaxIdleConnsPerHost: 4096, DisableCompression: true}}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		out, err := http.NewRequestWithContext(r.Context(), http.MethodPost, o.upstream+r.URL.Path, bytes.NewReader(body))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		out.Header.Set("Content-Type", r.Header.Get("Content-Type"))
		resp, err := client.Do(out)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		w.Header().Set("Content-Type", resp.Header.Get("Content-Type"))
		w.WriteHeader(resp.StatusCode)
		rc := http.NewResponseController(w)
		buf := make([]byte, 32<<10)
		for {
			n, err := resp.Body.Read(buf)
			if n > 0 {
				if _, werr := w.Write(buf[:n]); werr != nil || rc.Flush() != nil {
					return
				}
			}
			if err != nil {
				return
			}
		}
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	enc := json.NewEncoder(os.Stdout)
	if err := enc.Encode(childReady{Rollouts: []flywheel.RolloutRequest{{LLMURL: "http://" + ln.Addr().String() + "/v1"}}}); err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, os.Stdin)
	return enc.Encode(childDone{CPUSeconds: cpuSeconds()})
}

// collectAsServeDoes sets garbage collection at 4× the live heap, as gyre
// serve does, unless GOGC is set.
func collectAsServeDoes() {
	if _, set := os.LookupEnv("GOGC"); !set {
		debug.SetGCPercent(400)
	}
}

// startProfile writes a CPU profile to path until stop is called.
func startProfile(path string) (stop func(), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}

// child is gyre, or the baseline proxy, in a child process.
type child struct {
	done     *childDone
	cmd      *exec.Cmd
	stdin    io.WriteCloser
	out      *json.Decoder
	rollouts []flywheel.RolloutRequest
}

func startChild(role, upstream string, o options) (*child, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	args := []string{"-role", role, "-upstream", upstream, "-rollouts", fmt.Sprint(o.rollouts),
		"-flush-interval", o.flush.String(), "-flush-batch", fmt.Sprint(o.batch), "-grant-cache", o.cache.String()}
	if o.profile != "" && role == "gyre" {
		args = append(args, "-cpuprofile", o.profile)
	}
	cmd := exec.Command(exe, args...)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	c := &child{cmd: cmd, stdin: stdin, out: json.NewDecoder(stdout)}
	var ready childReady
	if err := c.out.Decode(&ready); err != nil {
		c.Close()
		return nil, fmt.Errorf("%s child: %w", role, err)
	}
	c.rollouts = ready.Rollouts
	return c, nil
}

func (c *child) Rollouts() []flywheel.RolloutRequest { return c.rollouts }

func (c *child) Records() (int, int, error) {
	done, err := c.finish()
	return done.Recorded, done.Counted, err
}

// finish closes the child's stdin and reads its last report, once.
func (c *child) finish() (childDone, error) {
	if c.done != nil {
		return *c.done, nil
	}
	_ = c.stdin.Close()
	var done childDone
	if err := c.out.Decode(&done); err != nil {
		return done, fmt.Errorf("child: %w", err)
	}
	if done.Error != "" {
		return done, errors.New(done.Error)
	}
	c.done = &done
	return done, nil
}

// cpuSeconds is this process's user and system CPU time so far.
func cpuSeconds() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

func (c *child) Close() {
	_ = c.stdin.Close()
	_ = c.cmd.Wait()
}

func mode(stream bool) string {
	if stream {
		return "streaming"
	}
	return "non-streaming"
}

// stub is the local upstream: it answers at once.
type stub struct {
	url string
	srv *http.Server
}

func (s *stub) Close() { _ = s.srv.Close() }

// startStub serves every benchProtocol at its path under /v1.
func startStub(chunks int) (*stub, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	for _, p := range benchProtocols(chunks) {
		mux.HandleFunc("POST /v1"+p.path, func(w http.ResponseWriter, r *http.Request) {
			body, _ := io.ReadAll(r.Body)
			if !bytes.Contains(body, []byte(`"stream":true`)) {
				w.Header().Set("Content-Type", "application/json")
				_, _ = w.Write(p.whole)
				return
			}
			w.Header().Set("Content-Type", "text/event-stream")
			f := w.(http.Flusher)
			for ev := range bytes.SplitAfterSeq(p.events, []byte("\n\n")) {
				if len(ev) > 0 {
					_, _ = w.Write(ev)
					f.Flush()
				}
			}
			if p.name != "chat" {
				return
			}
			if bytes.Contains(body, []byte(`"include_usage":true`)) {
				_, _ = w.Write(chatUsage)
			}
			_, _ = w.Write([]byte("data: [DONE]\n\n"))
		})
	}
	s := &stub{url: "http://" + ln.Addr().String(), srv: &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}}
	go func() { _ = s.srv.Serve(ln) }()
	return s, nil
}

// gyre is an in-process gyre server with the gateway.
type gyreServer struct {
	st       store.Store
	gw       *gateway.Gateway
	rollouts []flywheel.RolloutRequest
	tenantID string
	// stopServing shuts the HTTP server down gracefully, once.
	stopServing func()
	close       func()
}

func startGyre(upstreamURL string, o options) (*gyreServer, error) {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "gwbench-")
	if err != nil {
		return nil, err
	}
	var closers []func()
	cleanup := func() {
		for _, c := range slices.Backward(closers) {
			c()
		}
		_ = os.RemoveAll(dir)
	}
	fail := func(err error) (*gyreServer, error) { cleanup(); return nil, err }
	// Access logs go to a file, as gyre serve's JSON logs would go to a
	// collector: writing them is part of the cost.
	logFile, err := os.Create(filepath.Join(dir, "gyre.log"))
	if err != nil {
		return fail(err)
	}
	closers = append(closers, func() { logFile.Close() })
	log := telemetry.NewLogger(logFile, slog.LevelInfo, telemetry.LogJSON)
	st, err := storeopen.Open(ctx, storeopen.Options{DataDir: dir, Migrate: true})
	if err != nil {
		return fail(err)
	}
	closers = append(closers, func() { st.Close() })
	blobs, err := blobstore.Open(ctx, "", dir)
	if err != nil {
		return fail(err)
	}
	closers = append(closers, func() { blobs.Close() })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fail(err)
	}
	base := "http://" + ln.Addr().String()
	svc, err := rollout.New(rollout.Config{PublicURL: base, LeaseDefault: 300 * time.Second}, rollout.Deps{Store: st, Logger: log})
	if err != nil {
		return fail(err)
	}
	metrics := telemetry.NewMetrics()
	gw, err := gateway.New(gateway.Config{
		Upstreams: []gateway.Upstream{{Name: "stub", BaseURL: upstreamURL + "/v1", AllowPrivate: true,
			Protocols: gateway.Protocols}},
		GrantCacheTTL: o.cache,
		FlushInterval: o.flush,
		FlushBatch:    o.batch,
	}, gateway.Deps{Store: st, Blobs: blobs, Clock: clock.Real{}, Logger: log, Registerer: metrics.Registry})
	if err != nil {
		return fail(err)
	}
	srv, err := api.New(api.Config{PublicURL: base}, api.Deps{Store: st, Logger: log, Metrics: metrics, Blobs: blobs, Rollouts: svc, Gateway: gw})
	if err != nil {
		return fail(err)
	}
	if err := gw.Start(ctx); err != nil {
		return fail(err)
	}
	closers = append(closers, func() { _ = gw.Stop(context.Background()) })
	sctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { _ = srv.Serve(sctx, ln); close(done) }()
	stopServing := sync.OnceFunc(func() { stop(); <-done })
	closers = append(closers, stopServing)

	tenant, err := st.CreateTenant(ctx, "bench")
	if err != nil {
		return fail(err)
	}
	_, admin, err := auth.CreateKey(ctx, st, tenant.ID, auth.KeyRequest{Role: gyre.RoleAdmin})
	if err != nil {
		return fail(err)
	}
	_, agent, err := auth.CreateKey(ctx, st, tenant.ID, auth.KeyRequest{Role: gyre.RoleAgent})
	if err != nil {
		return fail(err)
	}
	c := &http.Client{}
	call := func(key, path, body string, out any) error {
		req, _ := http.NewRequest(http.MethodPost, base+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("Content-Type", "application/json")
		resp, err := c.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode/100 != 2 {
			return fmt.Errorf("POST %s: %d %s", path, resp.StatusCode, b)
		}
		if out != nil {
			return json.Unmarshal(b, out)
		}
		return nil
	}
	if err := call(admin, "/api/v1/policies", `{"name":"bench","upstream":"stub","model":"bench-model","tokenizer":"bench-tok",
		"sampling_overrides":{"temperature":1.0},"prices":{"input":1,"output":2}}`, nil); err != nil {
		return fail(err)
	}
	var cases []string
	for i := range o.rollouts {
		cases = append(cases, fmt.Sprintf(`{"id":"c%d","input":{"q":"refund %d"},"graders":[{"contains":"refund"}]}`, i, i))
	}
	if err := call(admin, "/api/v1/suites", `{"name":"bench","cases":[`+strings.Join(cases, ",")+`]}`, nil); err != nil {
		return fail(err)
	}
	var tasks struct {
		Items []struct {
			TaskID string `json:"task_id"`
		} `json:"items"`
	}
	if err := call(admin, "/api/v1/tasks", `{"suite":"bench"}`, &tasks); err != nil {
		return fail(err)
	}
	ids, _ := json.Marshal(func() []string {
		var out []string
		for _, t := range tasks.Items {
			out = append(out, t.TaskID)
		}
		return out
	}())
	if err := call(admin, "/api/v1/batches", `{"agent_id":"bench-agent","policy":"bench","deadline_s":3600,"task_ids":`+string(ids)+`}`, nil); err != nil {
		return fail(err)
	}
	var claim flywheel.ClaimResponse
	if err := call(agent, "/agents/bench-agent/claim", fmt.Sprintf(`{"max_rollouts":%d,"lease_seconds":300}`, o.rollouts), &claim); err != nil {
		return fail(err)
	}
	if len(claim.Rollouts) != o.rollouts {
		return fail(fmt.Errorf("claimed %d rollouts, want %d", len(claim.Rollouts), o.rollouts))
	}
	return &gyreServer{st: st, gw: gw, rollouts: claim.Rollouts, tenantID: tenant.ID, stopServing: stopServing, close: cleanup}, nil
}

// phase sends rate requests per second for d, open loop, and returns the
// latencies of the successful ones (to the end of the answer, and to the
// first streamed event) and the count of failures.
func phase(client *http.Client, p *benchProtocol, target func(int) (string, string), stream bool, rate int, d time.Duration) ([]time.Duration, []time.Duration, int) {
	n := int(d.Seconds() * float64(rate))
	interval := time.Second / time.Duration(rate)
	lat := make([]time.Duration, n)
	first := make([]time.Duration, n)
	var (
		wg    sync.WaitGroup
		fails atomic.Int64
	)
	start := time.Now()
	for i := range n {
		at := start.Add(time.Duration(i) * interval)
		if w := time.Until(at); w > 0 {
			time.Sleep(w)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			url, key := target(i)
			elapsed, ttfe, err := send(client, p, url, key, stream, at)
			if err != nil {
				if fails.Add(1) == 1 {
					fmt.Fprintf(os.Stderr, "gwbench: first failure: %v\n", err)
				}
				lat[i], first[i] = -1, -1
				return
			}
			lat[i], first[i] = elapsed, ttfe
		}()
	}
	wg.Wait()
	out, outFirst := lat[:0], first[:0]
	for i, l := range lat {
		if l >= 0 {
			out = append(out, l)
			outFirst = append(outFirst, first[i])
		}
	}
	return out, outFirst, int(fails.Load())
}

// send makes one request and returns the time from at (its scheduled
// start) to the end of the answer and, for a stream, to its first event.
func send(client *http.Client, p *benchProtocol, url, key string, stream bool, at time.Time) (time.Duration, time.Duration, error) {
	body := p.bodyWhole
	if stream {
		body = p.bodyStream
	}
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return 0, 0, err
	}
	req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) {
		if !i.Reused {
			dialled.Add(1)
		}
	}}))
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return 0, 0, fmt.Errorf("status %d: %s", resp.StatusCode, b)
	}
	if !stream {
		if _, err := io.Copy(io.Discard, resp.Body); err != nil {
			return 0, 0, err
		}
		d := time.Since(at)
		return d, d, nil
	}
	var (
		first    time.Duration
		sawFinal bool
	)
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if first == 0 && strings.HasPrefix(line, "data: ") {
			first = time.Since(at)
		}
		if p.final(line) {
			if !p.toEOF {
				return time.Since(at), first, nil
			}
			sawFinal = true
		}
	}
	if err := sc.Err(); err != nil {
		return 0, 0, err
	}
	if !sawFinal {
		return 0, 0, fmt.Errorf("%s stream ended without its final event", p.name)
	}
	return time.Since(at), first, nil
}

// dialled counts the connections the load generator opens in a phase.
var dialled atomic.Int64

type result struct {
	Mode     string `json:"mode"`
	Path     string `json:"path"`
	Requests int    `json:"requests"`
	Failures int    `json:"failures"`
	// P50MS and P99MS are to the end of the answer; FirstP50MS and
	// FirstP99MS to a stream's first event (the same for whole answers).
	P50MS      float64 `json:"p50_ms"`
	P99MS      float64 `json:"p99_ms"`
	FirstP50MS float64 `json:"first_event_p50_ms"`
	FirstP99MS float64 `json:"first_event_p99_ms"`
	// NewConns counts the requests that opened a connection rather than
	// reuse one: a client that stops at [DONE] (as openai-go does) can
	// reuse its connection only if the end of the body came with it.
	NewConns int `json:"new_connections"`
}

func quantile(lat []time.Duration, p float64) float64 {
	if len(lat) == 0 {
		return 0
	}
	i := min(int(p*float64(len(lat))), len(lat)-1)
	return float64(lat[i].Microseconds()) / 1000
}

func summarize(mode, path string, lat, first []time.Duration, fails int) result {
	slices.Sort(lat)
	slices.Sort(first)
	return result{Mode: mode, Path: path, Requests: len(lat), Failures: fails, P50MS: quantile(lat, 0.50), P99MS: quantile(lat, 0.99),
		FirstP50MS: quantile(first, 0.50), FirstP99MS: quantile(first, 0.99)}
}

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

type added struct {
	Mode     string  `json:"mode"`
	Path     string  `json:"path"`
	AddedP50 float64 `json:"added_p50_ms"`
	AddedP99 float64 `json:"added_p99_ms"`
	RatioP50 float64 `json:"ratio_p50"`
	RatioP99 float64 `json:"ratio_p99"`
	// The same for a stream's first event.
	FirstAddedP50 float64 `json:"first_event_added_p50_ms"`
	FirstAddedP99 float64 `json:"first_event_added_p99_ms"`
}

func report(w io.Writer, o options, rs []result, load0, load1 string, recorded, counted int, cpu map[string]float64) error {
	var adds []added
	var direct result
	for _, r := range rs {
		if r.Path == "direct" {
			direct = r
			continue
		}
		a := added{Mode: r.Mode, Path: r.Path, AddedP50: r.P50MS - direct.P50MS, AddedP99: r.P99MS - direct.P99MS,
			FirstAddedP50: r.FirstP50MS - direct.FirstP50MS, FirstAddedP99: r.FirstP99MS - direct.FirstP99MS}
		if direct.P50MS > 0 {
			a.RatioP50 = r.P50MS / direct.P50MS
		}
		if direct.P99MS > 0 {
			a.RatioP99 = r.P99MS / direct.P99MS
		}
		adds = append(adds, a)
	}
	if o.asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(map[string]any{"protocol": o.protocol, "rate": o.rate, "duration_s": o.duration.Seconds(), "results": rs, "added": adds,
			"load_average_before": load0, "load_average_after": load1, "gomaxprocs": runtime.GOMAXPROCS(0),
			"gateway_records": recorded, "gateway_counted": counted, "cpu_us_per_request": cpuMicros(cpu)})
	}
	fmt.Fprintf(w, "%-14s %-8s %9s %6s %9s %9s %12s %12s %10s\n", "MODE", "PATH", "REQUESTS", "FAILS", "P50_MS", "P99_MS", "1ST_P50_MS",
		"1ST_P99_MS", "NEW_CONNS")
	for _, r := range rs {
		fmt.Fprintf(w, "%-14s %-8s %9d %6d %9.3f %9.3f %12.3f %12.3f %10d\n", r.Mode, r.Path, r.Requests, r.Failures, r.P50MS, r.P99MS,
			r.FirstP50MS, r.FirstP99MS, r.NewConns)
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "%-14s %-8s %12s %12s %10s %10s %15s %15s\n", "MODE", "PATH", "ADDED_P50", "ADDED_P99", "RATIO_P50", "RATIO_P99",
		"1ST_ADDED_P50", "1ST_ADDED_P99")
	for _, a := range adds {
		fmt.Fprintf(w, "%-14s %-8s %9.3f ms %9.3f ms %9.2fx %9.2fx %12.3f ms %12.3f ms\n", a.Mode, a.Path, a.AddedP50, a.AddedP99,
			a.RatioP50, a.RatioP99, a.FirstAddedP50, a.FirstAddedP99)
	}
	fmt.Fprintf(w, "\nprotocol %s; rate %d req/s, %s per phase; GOMAXPROCS %d; load average %s before, %s after\n",
		o.protocol, o.rate, o.duration, runtime.GOMAXPROCS(0), load0, load1)
	fmt.Fprintf(w, "recording on: %d gateway records written (%d counted)\n", recorded, counted)
	for _, path := range []string{"proxy", "gateway"} {
		if us, ok := cpuMicros(cpu)[path]; ok {
			fmt.Fprintf(w, "CPU per request, %s process: %.0f µs\n", path, us)
		}
	}
	return nil
}

func cpuMicros(cpu map[string]float64) map[string]float64 {
	out := map[string]float64{}
	for k, v := range cpu {
		out[k] = v * 1e6
	}
	return out
}
