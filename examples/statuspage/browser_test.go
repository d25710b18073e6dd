package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	cdplog "github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/watertight/watertight/statuspage"
)

// requireChromium is the environment variable that turns a missing
// Chromium from a skip into a failure, for CI.
const requireChromium = "WATERTIGHT_REQUIRE_CHROMIUM"

// screenshotEnv names a file the test copies its screenshot to, if set.
const screenshotEnv = "WATERTIGHT_SCREENSHOT"

// TestBrowser serves the example in-process, runs a storm until chat's
// breaker is open, and loads the status page in headless Chromium. It
// checks that the page logs no error and throws nothing, that chat's
// breaker shows open, that what the page shows matches the JSON view, and
// that the page reloads itself; and it saves a screenshot.
func TestBrowser(t *testing.T) {
	bin := chromium(t)
	svc, base := serve(t)
	ctx, console, loads := browser(t, bin)

	// A few calls before the storm, so that the search endpoints have a
	// latency to show.
	for range 20 {
		svc.CallLogin(t.Context())
		svc.CallSearch(t.Context())
	}
	storm(t, svc, base)

	var dom []domPipeline
	var want statuspage.State
	for try := 0; ; try++ {
		before := state(t, base)
		resp, err := chromedp.Run(ctx, chromedp.NavigateResponse(base+PagePath))
		if err != nil {
			t.Fatal(err)
		}
		if resp.Status != http.StatusOK {
			t.Fatalf("GET %s: status %d", PagePath, resp.Status)
		}
		// One script reads the whole page at once: the page reloads
		// itself every 2 s, and a reload between two reads would mix
		// two renderings.
		got, err := chromedp.Run(ctx, chromedp.Evaluate[domPage](readPage))
		if err != nil {
			t.Fatal(err)
		}
		after := state(t, base)
		// The numbers move only when the page's sampler adds a second, and
		// after a minute, when the storm's seconds leave the window. When
		// the JSON views on either side agree, the page in between showed
		// the same state.
		if got.Ready == "complete" && sameNumbers(before, after) {
			dom, want = got.Pipelines, after
			break
		}
		if try == 2 {
			t.Fatalf("the state moved during each of 3 loads of the page (ready %q)", got.Ready)
		}
		t.Logf("the state moved while the page loaded (ready %q): loading it again", got.Ready)
	}
	loaded := loads.n.Load()
	checkPage(t, dom, want)
	screenshot(t, ctx)

	// The page reloads itself (meta refresh), with no JavaScript: wait for
	// a load after the last navigation's, so that its console counts too.
	if !loads.wait(loaded+1, 15*time.Second) {
		t.Errorf("the page did not reload itself within 15 s")
	}
	for _, e := range console.errors() {
		t.Errorf("browser console: %s", e)
	}
}

// chromium returns the path of Chromium on PATH, or skips the test (fails
// it if requireChromium is 1).
func chromium(t *testing.T) string {
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	msg := "chromium not found on PATH; install it (Debian: sudo apt-get update && sudo apt-get install -y chromium)"
	if os.Getenv(requireChromium) == "1" {
		t.Fatalf("%s, and %s=1", msg, requireChromium)
	}
	t.Skip(msg)
	return ""
}

// serve builds the service and serves it on a free loopback port until
// the test ends. It returns the service and the server's base URL.
func serve(t *testing.T) (*Service, string) {
	svc, err := NewService()
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		svc.Close()
		t.Fatal(err)
	}
	srv := &http.Server{Handler: svc.Handler(), ReadHeaderTimeout: 5 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("server shutdown: %v", err)
		}
		if err := <-served; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("server: %v", err)
		}
		if err := svc.Close(); err != nil {
			t.Errorf("service close: %v", err)
		}
	})
	return svc, "http://" + ln.Addr().String()
}

// consoleLog collects what the page logs as an error and what it throws.
type consoleLog struct {
	mu   sync.Mutex
	errs []string
}

func (c *consoleLog) add(format string, args ...any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.errs = append(c.errs, fmt.Sprintf(format, args...))
}

func (c *consoleLog) errors() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.errs...)
}

// loadCount counts a tab's loads.
type loadCount struct {
	n    atomic.Int64
	wake chan struct{} // has a value after n grows
}

func (l *loadCount) add() {
	l.n.Add(1)
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// wait reports whether the count reached n within d.
func (l *loadCount) wait(n int64, d time.Duration) bool {
	timeout := time.After(d)
	for l.n.Load() < n {
		select {
		case <-l.wake:
		case <-timeout:
			return false
		}
	}
	return true
}

// browser starts Chromium (bin) headless with one tab, whose console
// errors, uncaught exceptions and error log entries go to the consoleLog,
// and whose loads it counts. When the test
// ends it stops the browser and checks that no process of it is left.
func browser(t *testing.T, bin string) (context.Context, *consoleLog, *loadCount) {
	// chromedp's defaults (headless, no first-run page, no background
	// networking, /tmp for shared memory rather than a container's small
	// /dev/shm), and no sandbox: Chromium's refuses to start as root.
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(bin), chromedp.NoSandbox, chromedp.DisableGPU)
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	console := &consoleLog{}
	loads := &loadCount{wake: make(chan struct{}, 1)}
	ctx, cancel := chromedp.NewContext(allocCtx, chromedp.WithListener(func(ev any) {
		// Called on the tab's reading goroutine, in order: no command here.
		switch ev := ev.(type) {
		case *runtime.EventConsoleAPICalled:
			if ev.Type == runtime.ConsoleAPICalledTypeError {
				console.add("console.error%s", remoteArgs(ev.Args))
			}
		case *runtime.EventExceptionThrown:
			console.add("uncaught exception: %s", exceptionText(ev.ExceptionDetails))
		case *cdplog.EventEntryAdded:
			if ev.Entry.Level == cdplog.EntryLevelError {
				console.add("log %s: %s (%s)", ev.Entry.Source, ev.Entry.Text, ev.Entry.URL)
			}
		case *page.EventLoadEventFired:
			loads.add()
		}
	}))
	stop := func() {
		cancel()
		cancelAlloc() // kills the browser and waits for it
	}
	// The first command starts the browser.
	if err := chromedp.Do(ctx); err != nil {
		stop()
		t.Fatal(err)
	}
	// chromedp enables the log domain when it attaches the tab; enabling
	// it here says that the test depends on it.
	if _, err := chromedp.Call(ctx, cdplog.Enable, cdp.Empty{}); err != nil {
		stop()
		t.Fatal(err)
	}
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(1200, 900)); err != nil {
		stop()
		t.Fatal(err)
	}
	pid := chromedp.FromContext(ctx).Browser.Process().Pid
	dataDir := userDataDir(pid)
	t.Cleanup(func() {
		stop()
		checkGone(t, pid, dataDir)
	})
	return ctx, console, loads
}

// userDataDir returns the --user-data-dir of the process pid: chromedp
// gives every browser a new one, and passes it to each of its processes.
func userDataDir(pid int) string {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	for arg := range bytes.SplitSeq(b, []byte{0}) {
		if d, ok := strings.CutPrefix(string(arg), "--user-data-dir="); ok {
			return d
		}
	}
	return ""
}

// checkGone fails the test if the browser's main process pid, or any
// process started with its user data directory, is still running, or if
// the directory is left.
func checkGone(t *testing.T, pid int, dataDir string) {
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("the browser's process %d is still there after the allocator stopped (kill -0: %v)", pid, err)
	}
	if dataDir == "" {
		return // not on Linux, or no /proc
	}
	arg := []byte("--user-data-dir=" + dataDir + "\x00")
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		// A zombie's cmdline reads empty: only live processes match.
		if b, err := os.ReadFile(p); err == nil && bytes.Contains(b, arg) {
			t.Errorf("a browser process is left: %s: %s", p, bytes.ReplaceAll(b, []byte{0}, []byte{' '}))
		}
	}
	if _, err := os.Stat(dataDir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the browser's user data directory %s is left (%v)", dataDir, err)
	}
}

func remoteArgs(args []*runtime.RemoteObject) string {
	var parts []string
	for _, a := range args {
		if len(a.Value) > 0 {
			parts = append(parts, string(a.Value))
		} else {
			parts = append(parts, a.Description)
		}
	}
	return "(" + strings.Join(parts, ", ") + ")"
}

func exceptionText(d *runtime.ExceptionDetails) string {
	if d == nil {
		return "?"
	}
	s := fmt.Sprintf("%s at %s:%d:%d", d.Text, d.URL, d.LineNumber+1, d.ColumnNumber+1)
	if d.Exception != nil {
		s += ": " + d.Exception.Description
	}
	return s
}

// storm runs the service's storm until the JSON view shows chat's breaker
// open and calls it rejected, and stops it. The breaker then stays open for 30 s, with no call
// to change it. It waits until the page has sampled every rejection of the
// storm, so that the counts shown stay still.
func storm(t *testing.T, svc *Service, base string) {
	ctx, stop := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { defer close(done); svc.Storm(ctx) }()
	// Until the breaker is open and the page has counted calls it
	// rejected: the storm's callers go on calling it while it is open.
	opened := eventually(10*time.Second, func() bool {
		st := state(t, base)
		return breakerOf(st, "chat").State == "open" && rejectedBy(pipelineOf(st, "chat"), "breaker") > 0
	})
	stop()
	<-done
	if !opened {
		st := state(t, base)
		t.Fatalf("within 10 s of the storm, chat's breaker is %+v and rejected %d calls; want open, and more than 0",
			breakerOf(st, "chat"), rejectedBy(pipelineOf(st, "chat"), "breaker"))
	}
	var total int64
	for _, r := range svc.Chat.Rejections() {
		total += r.Calls
	}
	if total == 0 {
		t.Fatal("the storm had no call rejected")
	}
	if !eventually(5*time.Second, func() bool { return pipelineOf(state(t, base), "chat").Rejected == total }) {
		t.Fatalf("the page counts %d rejections of chat in the last minute 5 s after the storm; want all %d",
			pipelineOf(state(t, base), "chat").Rejected, total)
	}
}

// eventually reports whether cond held within d, polled every 50 ms.
func eventually(d time.Duration, cond func() bool) bool {
	for end := time.Now().Add(d); ; time.Sleep(50 * time.Millisecond) {
		if cond() {
			return true
		}
		if time.Now().After(end) {
			return false
		}
	}
}

// state GETs the page's JSON view.
func state(t *testing.T, base string) statuspage.State {
	t.Helper()
	resp, err := http.Get(base + PagePath + "?format=json")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s?format=json: %s", PagePath, resp.Status)
	}
	var st statuspage.State
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatal(err)
	}
	return st
}

func pipelineOf(st statuspage.State, name string) statuspage.PipelineState {
	for _, p := range st.Pipelines {
		if p.Name == name {
			return p
		}
	}
	return statuspage.PipelineState{}
}

// rejectedBy returns the calls of p that policies of kind rejected in the
// last minute.
func rejectedBy(p statuspage.PipelineState, kind string) int64 {
	var n int64
	for _, r := range p.Rejections {
		if r.Kind == kind {
			n += r.Calls
		}
	}
	return n
}

func breakerOf(st statuspage.State, pipeline string) statuspage.BreakerState {
	for _, s := range pipelineOf(st, pipeline).Slots {
		if s.Breaker != nil {
			return *s.Breaker
		}
	}
	return statuspage.BreakerState{}
}

// sameNumbers reports whether a and b agree on what the test compares
// with the page: everything but the time, the rejections per second, which
// shift by one each second, and the endpoints' latency and load, which
// decay between reads.
func sameNumbers(a, b statuspage.State) bool {
	strip := func(st statuspage.State) statuspage.State {
		st.Time = time.Time{}
		ps := make([]statuspage.PipelineState, len(st.Pipelines))
		for i, p := range st.Pipelines {
			p.PerSecond = nil
			p.Endpoints = append([]statuspage.EndpointState(nil), p.Endpoints...)
			for j := range p.Endpoints {
				p.Endpoints[j].Latency, p.Endpoints[j].Load = 0, 0
			}
			ps[i] = p
		}
		st.Pipelines = ps
		return st
	}
	return reflect.DeepEqual(strip(a), strip(b))
}

// domPage is what readPage reads from the page.
type domPage struct {
	Ready     string        `json:"ready"`
	Pipelines []domPipeline `json:"pipelines"`
}

type domPipeline struct {
	Name       string     `json:"name"`
	Rejected   string     `json:"rejected"`
	Slots      []domSlot  `json:"slots"`
	Endpoints  [][]string `json:"endpoints"`  // the cells of each row
	Rejections [][]string `json:"rejections"` // the cells of each row
}

type domSlot struct {
	Class        string   `json:"class"`  // the row's class, slot-NAME
	Policy       string   `json:"policy"` // the policy cell's text
	Bold         []string `json:"bold"`   // the state cell's <b> texts
	Text         string   `json:"text"`   // the state cell's text, spaces folded
	Breaker      string   `json:"breaker"`
	BreakerClass string   `json:"breakerClass"`
}

// readPage is the script that reads the page in one go.
const readPage = `(() => {
	const txt = (n) => n ? n.textContent.replace(/\s+/g, " ").trim() : null;
	const rows = (table) => table ? [...table.querySelectorAll("tr")].filter((r) => r.cells[0].tagName === "TD").map((r) => [...r.cells].map(txt)) : [];
	return {
		ready: document.readyState,
		pipelines: [...document.querySelectorAll("section[id^='p-']")].map((s) => ({
			name: s.id.slice(2),
			rejected: txt(s.querySelector("b.rejected")),
			slots: [...s.querySelectorAll("table.slots tr[class^='slot-']")].map((r) => {
				const st = r.cells[2], b = st.querySelector("span.breaker-state");
				return {class: r.className, policy: txt(r.cells[1]), bold: [...st.querySelectorAll("b")].map(txt),
					text: txt(st), breaker: b ? txt(b) : "", breakerClass: b ? b.className : ""};
			}),
			endpoints: rows(s.querySelector("table.endpoints")),
			rejections: rows(s.querySelector("table.rejections")),
		})),
	};
})()`

// checkPage compares what the page shows with the JSON view want.
func checkPage(t *testing.T, dom []domPipeline, want statuspage.State) {
	t.Helper()
	if len(dom) != len(want.Pipelines) {
		t.Fatalf("the page shows %d pipelines; the JSON view %d", len(dom), len(want.Pipelines))
	}
	for i, w := range want.Pipelines {
		d := dom[i]
		if d.Name != w.Name {
			t.Errorf("pipeline %d: the page shows %q; the JSON view %q", i, d.Name, w.Name)
			continue
		}
		if d.Rejected != strconv.FormatInt(w.Rejected, 10) {
			t.Errorf("%s: rejected in the last minute: the page shows %q; the JSON view %d", w.Name, d.Rejected, w.Rejected)
		}
		checkSlots(t, w.Name, d.Slots, w.Slots)
		checkRows(t, w.Name+" endpoints", d.Endpoints, endpointRows(w.Endpoints))
		checkEndpointPolicies(t, w.Name, d.Endpoints, w.Endpoints)
		checkRows(t, w.Name+" rejections", d.Rejections, rejectionRows(w.Rejections))
	}
	chat := pipelineOf(want, "chat")
	if chat.Rejected == 0 || len(chat.Rejections) == 0 {
		t.Errorf("chat: no rejection shown after the storm: %+v", chat)
	}
	for _, d := range dom {
		if d.Name != "chat" {
			continue
		}
		for _, s := range d.Slots {
			if s.Class == "slot-Breaker" && (s.Breaker != "open" || !strings.Contains(" "+s.BreakerClass+" ", " open ")) {
				t.Errorf("chat's breaker cell shows %q (class %q); want open", s.Breaker, s.BreakerClass)
			}
		}
	}
}

func checkSlots(t *testing.T, name string, dom []domSlot, want []statuspage.SlotState) {
	t.Helper()
	if len(dom) != len(want) {
		t.Errorf("%s: the page shows %d slots; the JSON view %d", name, len(dom), len(want))
		return
	}
	for i, w := range want {
		d := dom[i]
		if d.Class != "slot-"+w.Slot || d.Policy != strings.TrimSpace(w.Type+" "+w.Name) {
			t.Errorf("%s slot %d: the page shows %s %q; the JSON view %s %q", name, i, d.Class, d.Policy, w.Slot, w.Type+" "+w.Name)
			continue
		}
		switch {
		case w.Bulkhead != nil:
			b := w.Bulkhead
			if want := []string{strconv.Itoa(b.Limit), strconv.Itoa(b.Active), strconv.Itoa(b.Queued)}; !reflect.DeepEqual(d.Bold, want) {
				t.Errorf("%s %s: limit, active, queued: the page shows %q; the JSON view %q", name, w.Slot, d.Bold, want)
			}
		case w.Breaker != nil:
			b := w.Breaker
			if d.Breaker != b.State || !strings.Contains(" "+d.BreakerClass+" ", " "+b.State+" ") {
				t.Errorf("%s %s: the page shows %q (class %q); the JSON view %q", name, w.Slot, d.Breaker, d.BreakerClass, b.State)
			}
			// The template formats the time in the server's zone; the JSON
			// view carries that zone's offset.
			if b.OpenUntil != nil && !strings.Contains(d.Text, "until "+b.OpenUntil.Format("15:04:05.000")) {
				t.Errorf("%s %s: the page shows %q; want open until %s", name, w.Slot, d.Text, b.OpenUntil.Format("15:04:05.000"))
			}
			// The counts show only while closed.
			counts := fmt.Sprintf("requests %d, successes %d, failures %d, in a row %d, slow %d",
				b.Requests, b.Successes, b.Failures, b.ConsecutiveFailures, b.SlowCalls)
			if shown := strings.Contains(d.Text, "requests "); shown != (b.State == "closed") || shown && !strings.Contains(d.Text, counts) {
				t.Errorf("%s %s (%s): the page shows %q; want the counts %q only while closed", name, w.Slot, b.State, d.Text, counts)
			}
		case w.Retry != nil:
			if !strings.HasPrefix(d.Text, fmt.Sprintf("%d attempts", w.Retry.MaxAttempts)) {
				t.Errorf("%s %s: the page shows %q; the JSON view %d attempts", name, w.Slot, d.Text, w.Retry.MaxAttempts)
			}
		case w.Deadline != nil:
			if d.Text != "timeout "+w.Deadline.Timeout {
				t.Errorf("%s %s: the page shows %q; the JSON view timeout %s", name, w.Slot, d.Text, w.Deadline.Timeout)
			}
		}
	}
}

// endpointRows returns the name, in-flight and state cells the page
// should show for eps, and each of the endpoint's own policies with its
// slot and, for a breaker, its state; the latency and load cells are
// left empty, as checkRows skips them, and the policies cell is checked
// by checkEndpointPolicies.
func endpointRows(eps []statuspage.EndpointState) [][]string {
	var rows [][]string
	for _, e := range eps {
		st := "in"
		switch {
		case e.Ejected:
			st = "ejected"
		case e.Out:
			st = "out"
		}
		rows = append(rows, []string{e.Name, strconv.Itoa(e.InFlight), "", "", st, ""})
	}
	return rows
}

// checkEndpointPolicies checks that each endpoint's row names its own
// policies by slot, with a breaker's state and an attempt's timeout.
func checkEndpointPolicies(t *testing.T, name string, dom [][]string, eps []statuspage.EndpointState) {
	t.Helper()
	for i, e := range eps {
		if i >= len(dom) || len(dom[i]) < 6 {
			return // checkRows reported it
		}
		for _, s := range e.Slots {
			want := s.Slot + ":"
			switch {
			case s.Breaker != nil:
				want += " " + s.Breaker.State
			case s.Deadline != nil:
				want += " timeout " + s.Deadline.Timeout
			}
			if !strings.Contains(dom[i][5], want) {
				t.Errorf("%s endpoint %s: the page shows %q; want %q", name, e.Name, dom[i][5], want)
			}
		}
	}
}

func rejectionRows(rs []statuspage.RejectionState) [][]string {
	var rows [][]string
	for _, r := range rs {
		rows = append(rows, []string{strings.TrimSpace(r.Kind + " " + r.Name), r.Reason, strconv.FormatInt(r.Calls, 10)})
	}
	return rows
}

// checkRows compares a table's rows with want's, skipping the cells that
// want leaves empty.
func checkRows(t *testing.T, what string, dom, want [][]string) {
	t.Helper()
	if len(dom) != len(want) {
		t.Errorf("%s: the page shows %d rows %q; the JSON view %d %q", what, len(dom), dom, len(want), want)
		return
	}
	for i := range want {
		if len(dom[i]) != len(want[i]) {
			t.Errorf("%s row %d: the page shows %q; want %q", what, i, dom[i], want[i])
			continue
		}
		for j, w := range want[i] {
			if w != "" && dom[i][j] != w {
				t.Errorf("%s row %d: the page shows %q; want %q", what, i, dom[i], want[i])
				break
			}
		}
	}
}

// screenshot writes a full-page PNG to the test's temporary directory,
// and copies it to the file screenshotEnv names, if set.
func screenshot(t *testing.T, ctx context.Context) {
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "statuspage.png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s (%d bytes)", path, len(png))
	if dst := os.Getenv(screenshotEnv); dst != "" {
		if err := os.WriteFile(dst, png, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("screenshot copied to %s", dst)
	}
}
