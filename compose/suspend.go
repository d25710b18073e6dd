package compose

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/watertight/watertight/internal/stage"
	"github.com/watertight/watertight/internal/telemetry"
	"github.com/watertight/watertight/policy"
)

// A pipeline whose every slot runs in two phases (a Stage or a Repeater)
// can suspend a call (see stage.Suspender): httppolicy's Transport then
// hands a streamed response over without a goroutine of its own to hold
// the call open. The functions
// here mirror run, runStage, runTimed, loop, tracedAttempt and
// executeObserved; each returns, beside the error, the suspension if fn
// suspended the call, to which it adds its own frame (what it does after
// fn) instead of doing it. Execute's own path is untouched.

func init() {
	stage.RegisterSuspender(func(p policy.Policy) stage.Suspender {
		if s, ok := p.(suspendable); ok {
			return s.suspender()
		}
		return nil
	})
}

// suspendable is implemented by *Pipeline, and by any type that embeds
// one (the root package's Pipeline).
type suspendable interface {
	suspender() stage.Suspender
}

// suspender returns the pipeline's Suspender face, or nil if it cannot
// suspend a call.
func (p *Pipeline) suspender() stage.Suspender {
	if !p.suspends {
		return nil
	}
	return (*suspendFace)(p)
}

// canSuspend reports whether a pipeline with the slots st can suspend a
// call.
func canSuspend(st []slot) bool {
	// The frames a suspension may need, at most: one per slot (a Stage's
	// exit or a Repeater's decision), an attempt span and a latency sample
	// inside each Repeater, the latency sample under the first slot, and
	// the call's telemetry. A pipeline that could need more than a
	// suspension holds runs on the goroutine path instead (a Repeater in
	// every slot with an adaptive limit and tracing needs 18; the usual
	// pipeline of five slots with one retry, 9).
	frames := len(st) + 2
	for i := range st {
		if st[i].twoPhase == nil && st[i].repeater == nil {
			return false
		}
		if st[i].repeater != nil {
			frames += 2
		}
	}
	return frames <= maxFrames
}

// suspendFace is a Pipeline's stage.Suspender.
type suspendFace Pipeline

// ExecuteSuspendable implements stage.Suspender.
func (f *suspendFace) ExecuteSuspendable(ctx context.Context, fn stage.Attempter) (stage.Suspended, error) {
	p := (*Pipeline)(f)
	if ctx == nil {
		panic("compose: nil Context")
	}
	if fn == nil {
		panic("compose: nil fn")
	}
	tr := p.tracer.Tracer()
	timed := p.duration.Enabled(ctx)
	var err error
	var sp *suspension
	if tr == nil && !timed {
		err, sp = p.srun(ctx, 0, fn, nil)
	} else {
		err, sp = p.sexecuteObserved(ctx, fn, tr, timed)
	}
	if sp != nil {
		return sp, nil
	}
	return nil, err
}

// Kinds of frames.
const (
	frameStage    = iota // a Stage's Exit
	frameTimed           // the observer's latency sample
	frameLoop            // a Repeater's decision
	frameTraced          // an attempt span's end
	frameObserved        // the call's span and duration
)

// maxFrames bounds the frames of one suspension: one per slot (at most 6),
// the timing, the attempt span and the call's telemetry.
const maxFrames = 10

// frame is what one level of the pipeline does after fn, kept while the
// call is suspended.
type frame struct {
	kind  int
	i     int                // the slot's index (frameLoop)
	n     int                // the attempt's number (frameLoop)
	ctx   context.Context    // the stage's inner context, the loop's or the call's
	s     stage.Stage        // frameStage
	r     stage.Repeater     // frameLoop
	token stage.Token        // the Stage's token, or the Repeater's state
	fn    stage.Attempter    // frameLoop: for attempts run at Resume
	tr    trace.Tracer       // frameLoop: the attempt tracer
	span  trace.Span         // frameTraced, frameObserved
	start time.Time          // frameTimed, frameObserved
	clock *stage.AnswerClock // frameTimed
	timed bool               // frameObserved
}

// suspension is a suspended call: its frames, innermost first.
type suspension struct {
	p       *Pipeline
	n       int
	frames  [maxFrames]frame
	resumed bool
}

func (s *suspension) push(f frame) {
	s.frames[s.n] = f
	s.n++
}

// Resume implements stage.Suspended: it runs the frames innermost first.
// If one panics (or calls runtime.Goexit), the frames outside it abort as
// runStage's deferred Exit would, and the panic goes on.
func (s *suspension) Resume(err error) error {
	if s.resumed {
		panic("compose: suspended call resumed twice")
	}
	s.resumed = true
	return s.exitFrom(0, err)
}

func (s *suspension) exitFrom(k int, err error) error {
	for ; k < s.n; k++ {
		ok := false
		func() {
			defer func() {
				if !ok {
					s.abortFrom(k + 1)
				}
			}()
			err = s.exit(&s.frames[k], err)
			ok = true
		}()
	}
	return err
}

// abortFrom aborts frames k and outward, each even if one inside it
// panics.
func (s *suspension) abortFrom(k int) {
	if k >= s.n {
		return
	}
	defer s.abortFrom(k + 1)
	f := &s.frames[k]
	switch f.kind {
	case frameStage:
		f.s.Exit(f.ctx, f.token, stage.ErrAborted)
	case frameTraced:
		endAttemptSpan(f.span, stage.ErrAborted)
	case frameObserved:
		s.p.observe(f.ctx, f.span, f.start, f.timed, stage.ErrAborted)
	}
}

// exit runs frame f with fn's (or the inner frames') outcome err.
func (s *suspension) exit(f *frame, err error) error {
	p := s.p
	switch f.kind {
	case frameStage:
		return f.s.Exit(f.ctx, f.token, err)
	case frameTimed:
		end := time.Now()
		d := end.Sub(f.start)
		if f.clock != nil {
			d = f.clock.Latency(end)
		}
		observe(p.observer, d, err)
		return err
	case frameLoop:
		if err == nil {
			return nil
		}
		again, next, final := f.r.Next(f.ctx, f.n, err, f.token)
		if !again {
			return final
		}
		return p.loopFrom(f.ctx, f.i, f.r, f.fn.Attempt, f.tr, f.n+1, next)
	case frameTraced:
		endAttemptSpan(f.span, err)
		return err
	default: // frameObserved
		p.observe(f.ctx, f.span, f.start, f.timed, err)
		return err
	}
}

func endAttemptSpan(span trace.Span, err error) {
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
		span.SetAttributes(telemetry.KeyError.String(telemetry.ErrorType(err)))
	}
	span.End()
}

func (p *Pipeline) sexecuteObserved(ctx context.Context, fn stage.Attempter, tr trace.Tracer, timed bool) (err error, sp *suspension) {
	var start time.Time
	if timed {
		start = time.Now()
	}
	var span trace.Span
	if tr != nil {
		ctx, span = tr.Start(ctx, p.spanName, p.spanOpts...)
	}
	finished := false
	defer func() {
		if !finished {
			p.observe(ctx, span, start, timed, stage.ErrAborted)
		}
	}()
	var attempts trace.Tracer
	if span != nil && span.IsRecording() {
		attempts = tr
	}
	err, sp = p.srun(ctx, 0, fn, attempts)
	finished = true
	if sp != nil {
		sp.push(frame{kind: frameObserved, ctx: ctx, span: span, start: start, timed: timed})
		return nil, sp
	}
	p.observe(ctx, span, start, timed, err)
	return err, nil
}

// srun is run for a pipeline that can suspend: every slot is a Stage or a
// Repeater.
func (p *Pipeline) srun(ctx context.Context, i int, fn stage.Attempter, attempts trace.Tracer) (error, *suspension) {
	if i == len(p.stages) {
		err := fn.Attempt(ctx)
		if err == stage.ErrSuspend {
			return nil, &suspension{p: p}
		}
		return err, nil
	}
	st := &p.stages[i]
	if st.repeater != nil {
		return p.sloop(ctx, i, st.repeater, fn, attempts)
	}
	return p.srunStage(ctx, i, st.twoPhase, fn, attempts)
}

func (p *Pipeline) srunStage(ctx context.Context, i int, s stage.Stage, fn stage.Attempter, attempts trace.Tracer) (error, *suspension) {
	inner, token, err := s.Enter(ctx)
	if err != nil {
		return err, nil
	}
	finished := false
	defer func() {
		if !finished {
			s.Exit(inner, token, stage.ErrAborted)
		}
	}()
	var sp *suspension
	if i == 0 && p.observer != nil && !p.perAttempt {
		err, sp = p.srunTimed(inner, i+1, fn, attempts)
	} else {
		err, sp = p.srun(inner, i+1, fn, attempts)
	}
	finished = true
	if sp != nil {
		sp.push(frame{kind: frameStage, ctx: inner, s: s, token: token})
		return nil, sp
	}
	return s.Exit(inner, token, err), nil
}

func (p *Pipeline) srunTimed(ctx context.Context, i int, fn stage.Attempter, attempts trace.Tracer) (error, *suspension) {
	clock := stage.AnswerClockFrom(ctx)
	start := time.Now()
	if clock != nil {
		clock.Start(start)
	}
	err, sp := p.srun(ctx, i, fn, attempts)
	if sp != nil {
		sp.push(frame{kind: frameTimed, start: start, clock: clock})
		return nil, sp
	}
	end := time.Now()
	d := end.Sub(start)
	if clock != nil {
		d = clock.Latency(end)
	}
	observe(p.observer, d, err)
	return err, nil
}

func (p *Pipeline) sloop(ctx context.Context, i int, r stage.Repeater, fn stage.Attempter, tr trace.Tracer) (error, *suspension) {
	var state stage.Token
	for n := 1; ; n++ {
		actx := r.AttemptContext(ctx, n)
		var err error
		var sp *suspension
		switch {
		case tr != nil:
			err, sp = p.stracedAttempt(actx, tr, n, i+1, fn)
		case p.observer != nil:
			err, sp = p.srunTimed(actx, i+1, fn, nil)
		default:
			err, sp = p.srun(actx, i+1, fn, nil)
		}
		if sp != nil {
			sp.push(frame{kind: frameLoop, ctx: ctx, i: i, n: n, r: r, token: state, fn: fn, tr: tr})
			return nil, sp
		}
		if err == nil {
			return nil, nil
		}
		again, next, final := r.Next(ctx, n, err, state)
		if !again {
			return final, nil
		}
		state = next
	}
}

func (p *Pipeline) stracedAttempt(ctx context.Context, tr trace.Tracer, n, i int, fn stage.Attempter) (err error, sp *suspension) {
	var opts []trace.SpanStartOption
	if n <= len(p.attemptOpts) {
		opts = p.attemptOpts[n-1]
	} else {
		opts = attemptOptions(n)
	}
	ctx, span := tr.Start(ctx, p.attemptName, opts...)
	finished := false
	defer func() {
		if !finished {
			endAttemptSpan(span, stage.ErrAborted)
		}
	}()
	if p.observer != nil {
		err, sp = p.srunTimed(ctx, i, fn, nil)
	} else {
		err, sp = p.srun(ctx, i, fn, nil)
	}
	finished = true
	if sp != nil {
		sp.push(frame{kind: frameTraced, span: span})
		return nil, sp
	}
	endAttemptSpan(span, err)
	return err, nil
}
