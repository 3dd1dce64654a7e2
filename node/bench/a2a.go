package bench

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2aclient"
	"github.com/a2aproject/a2a-go/v2/a2asrv"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/kithmesh/kith/crypto"
	"github.com/kithmesh/kith/delegation"
	"github.com/kithmesh/kith/node/gateway"
	"github.com/kithmesh/kith/store"
)

// The A2A phases send A2A SendMessage (JSON-RPC, blocking) over loopback
// HTTP to kith's gateway, where each message is a durable local echo
// delegation with a signed result, and to a plain a2a-go echo agent in
// task mode (its in-memory task store), side by side.
const (
	PhaseA2AGateway PhaseName = "a2a-gateway"
	PhaseA2AAgent   PhaseName = "a2a-go-agent"
)

// goalA2AX is the gateway's p50 target as a multiple of the plain agent's.
const goalA2AX = 2

type a2aPair struct {
	st      *store.Store
	cancel  context.CancelFunc
	done    chan error
	servers []*http.Server
	gw, raw *a2aclient.Client
}

// noDial: the gateway's engine runs its echo profile locally.
type noDial struct{}

func (noDial) OpenStream(context.Context, peer.ID) (delegation.Stream, error) {
	return nil, errors.New("bench: no network")
}

// echoAgent is the a2a-go baseline: a task that completes with the text.
type echoAgent struct{}

func (echoAgent) Execute(_ context.Context, ec *a2asrv.ExecutorContext) iter.Seq2[a2a.Event, error] {
	return func(yield func(a2a.Event, error) bool) {
		if !yield(a2a.NewSubmittedTask(ec, ec.Message), nil) {
			return
		}
		e := a2a.NewArtifactUpdateEvent(ec, "output", ec.Message.Parts...)
		e.Append, e.LastChunk = false, true
		if !yield(e, nil) {
			return
		}
		yield(a2a.NewStatusUpdateEvent(ec, a2a.TaskStateCompleted, nil), nil)
	}
}

func (echoAgent) Cancel(_ context.Context, ec *a2asrv.ExecutorContext) iter.Seq2[a2a.Event, error] {
	return func(yield func(a2a.Event, error) bool) {
		yield(a2a.NewStatusUpdateEvent(ec, a2a.TaskStateCanceled, nil), nil)
	}
}

func serve(h http.Handler) (*http.Server, string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, "", err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	return srv, "http://" + ln.Addr().String(), nil
}

// startA2A starts both servers and their clients; Close stops them.
func startA2A(ctx context.Context, dir string, conc int, budget uint64) (_ *a2aPair, err error) {
	p := &a2aPair{}
	defer func() {
		if err != nil {
			err = errors.Join(err, p.Close())
		}
	}()
	id, err := crypto.GenerateIdentity()
	if err != nil {
		return nil, err
	}
	if p.st, err = store.Open(filepath.Join(dir, "a2a-gateway"), store.Options{}); err != nil {
		return nil, err
	}
	cfg := engineConfig(id, p.st, hostDialer{}, 4, budget)
	cfg.Dialer = noDial{}
	eng, err := delegation.New(cfg)
	if err != nil {
		return nil, err
	}
	runCtx, cancel := context.WithCancel(context.Background())
	p.cancel, p.done = cancel, make(chan error, 1)
	go func() { p.done <- eng.Run(runCtx) }()

	var base string
	gw := gateway.New(gateway.Config{
		Engine: eng, Store: p.st, Identity: id, BaseURL: func() string { return base },
		MaxBodyBytes: 1 << 20, Version: "bench",
	})
	srv, url, err := serve(gw.Handler())
	if err != nil {
		return nil, err
	}
	base = url
	p.servers = append(p.servers, srv)
	quiet := slog.New(slog.DiscardHandler)
	rawSrv, rawURL, err := serve(a2asrv.NewJSONRPCHandler(a2asrv.NewHandler(echoAgent{}, a2asrv.WithLogger(quiet))))
	if err != nil {
		return nil, err
	}
	p.servers = append(p.servers, rawSrv)

	hc := &http.Client{Transport: &http.Transport{MaxIdleConns: 2 * conc, MaxIdleConnsPerHost: 2 * conc}}
	opts := []a2aclient.FactoryOption{a2aclient.WithDefaultsDisabled(), a2aclient.WithJSONRPCTransport(hc)}
	card, ok, err := gw.ProfileCard("echo")
	if err != nil || !ok {
		return nil, fmt.Errorf("bench: gateway card: %v", err)
	}
	if p.gw, err = a2aclient.NewFromCard(ctx, card, opts...); err != nil {
		return nil, err
	}
	p.raw, err = a2aclient.NewFromEndpoints(ctx, []*a2a.AgentInterface{{URL: rawURL, ProtocolBinding: a2a.TransportProtocolJSONRPC, ProtocolVersion: a2a.Version}}, opts...)
	if err != nil {
		return nil, err
	}
	return p, nil
}

// send is one blocking SendMessage that must come back completed with the
// text.
func send(ctx context.Context, c *a2aclient.Client, text string) error {
	res, err := c.SendMessage(ctx, &a2a.SendMessageRequest{Message: a2a.NewMessage(a2a.MessageRoleUser, a2a.NewTextPart(text))})
	if err != nil {
		return err
	}
	t, ok := res.(*a2a.Task)
	if !ok || t.Status.State != a2a.TaskStateCompleted || len(t.Artifacts) == 0 {
		return fmt.Errorf("bench: A2A answer %T not a completed task with output", res)
	}
	if got := t.Artifacts[len(t.Artifacts)-1].Parts[0].Text(); got != text {
		return fmt.Errorf("bench: A2A echo returned %d bytes, sent %d", len(got), len(text))
	}
	return nil
}

func (p *a2aPair) Close() error {
	var errs []error
	for _, c := range []*a2aclient.Client{p.gw, p.raw} {
		if c != nil {
			errs = append(errs, c.Destroy())
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, s := range p.servers {
		errs = append(errs, s.Shutdown(ctx))
	}
	if p.cancel != nil {
		p.cancel()
		errs = append(errs, <-p.done)
	}
	if p.st != nil {
		errs = append(errs, p.st.Close())
	}
	return errors.Join(errs...)
}

// a2aGoal judges the gateway against the plain agent at the highest
// concurrency measured.
func a2aGoal(r Report) Goal {
	conc := 0
	for _, c := range r.Concurrency {
		conc = max(conc, c)
	}
	g := Goal{
		Name:   fmt.Sprintf("A2A gateway SendMessage, durable and signed (concurrency %d)", conc),
		Target: fmt.Sprintf("p50 ≤ %d× a2a-go task-mode echo p50", goalA2AX),
		Limit:  goalA2AX,
	}
	gw, okg := r.phase(PhaseA2AGateway, "", conc)
	raw, okr := r.phase(PhaseA2AAgent, "", conc)
	if !okg || !okr {
		g.Status = GoalNotMeasured
		return g
	}
	g.Value = ratio(gw.RoundTrip.P50, raw.RoundTrip.P50)
	g.Measured = fmt.Sprintf("%.2f× (%s vs %s; %.0f/s vs %.0f/s)", g.Value, fmtDur(gw.RoundTrip.P50), fmtDur(raw.RoundTrip.P50), gw.OpsPerSec, raw.OpsPerSec)
	g.Status = judge(g.Value <= g.Limit, gw, raw)
	return g
}
