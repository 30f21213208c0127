package inspect

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/a2redis/a2redis/redisstore"
)

// The dashboard's overview (counts per consumer, charts) and its
// dead-letter page across sessions with bulk retry and skip.

// overviewRow is one consumer's row of the overview.
type overviewRow struct {
	consumerStats
	CompletedPerMin, FailedPerMin string
	OldestAge                     string
}

// overview: readFleetStats (bounded calls) and one Workers page.
func (d *dash) overview(w http.ResponseWriter, r *http.Request) {
	st, err := d.a.readFleetStats(r.Context())
	if err != nil {
		d.fail(w, err)
		return
	}
	if d.hist.due(st.At) {
		d.hist.add(st)
	}
	rates := d.hist.rates()
	rows := make([]overviewRow, len(st.Consumers))
	var dead int64
	for i, c := range st.Consumers {
		rows[i] = overviewRow{consumerStats: c, OldestAge: "-",
			CompletedPerMin: strconv.FormatFloat(rates[c.Consumer].CompletedPerMin, 'f', 1, 64),
			FailedPerMin:    strconv.FormatFloat(rates[c.Consumer].FailedPerMin, 'f', 1, 64)}
		if !c.OldestDue.IsZero() {
			rows[i].OldestAge = age(c.OldestDue, st.At)
		}
		dead += c.Dead
	}
	cctx, cancel := d.call(r)
	wp, err := d.a.store.Workers(cctx, redisstore.PageRequest{Limit: dashboardPage})
	cancel()
	if err != nil {
		d.fail(w, err)
		return
	}
	// The prefix's dead letters in all, exact: the dead index's totals
	// (its cost grows with the sessions that hold dead letters only).
	cctx, cancel = d.call(r)
	sum, err := d.a.store.DeadSummaryOf(cctx)
	cancel()
	if err != nil {
		d.fail(w, err)
		return
	}
	dead = sum.DeadLetters
	d.render(w, "overview", map[string]any{
		"Title": "Overview", "Refresh": 10, "Consumers": rows, "Dead": dead, "DeadSessions": sum.Sessions, "Sessions": st.Sessions, "Approximate": st.Approximate,
		"Workers": len(wp.Workers), "MoreWorkers": wp.Next != "", "Every": sampleEvery.String(),
	})
}

// statsJSON serves the chart samples of the last hour.
func (d *dash) statsJSON(w http.ResponseWriter, r *http.Request) {
	if st, err := d.a.readFleetStats(r.Context()); err == nil && d.hist.due(st.At) {
		d.hist.add(st)
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"every_seconds": sampleEvery.Seconds(), "samples": d.hist.list()})
}

// deadAcross: one DeadLettersAcross page of the filter.
func (d *dash) deadAcross(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	consumer, errText := q.Get("consumer"), q.Get("error")
	cctx, cancel := d.call(r)
	page, err := d.a.store.DeadLettersAcross(cctx, redisstore.DeadLetterQuery{Consumer: consumer, Error: errText, After: q.Get("after"), Limit: dashboardPage})
	cancel()
	if err != nil {
		d.fail(w, err)
		return
	}
	var names []string
	for _, c := range d.a.store.Consumers() {
		names = append(names, c.Name)
	}
	next := ""
	if page.Next != "" {
		next = url.Values{"consumer": {consumer}, "error": {errText}, "after": {page.Next}}.Encode()
	}
	d.render(w, "dead", map[string]any{
		"Title": "Dead letters", "DeadLetters": page.DeadLetters, "Consumer": consumer, "Error": errText,
		"Names": names, "Next": next, "First": q.Get("after") == "",
	})
}

// redriveJob is one bulk retry or skip, run in the background batch by
// batch (each batch a call of its own), its progress read by the job page.
type redriveJob struct {
	ID, Consumer, Error string
	Action              redisstore.RedriveAction
	Before              time.Time

	mu       sync.Mutex
	progress redisstore.RedriveProgress
	err      string
	done     bool
}

// redriveJobs are the serving process's bulk runs.
type redriveJobs struct {
	mu   sync.Mutex
	next int
	byID map[string]*redriveJob
}

// redriveAcross confirms, then starts, a bulk retry or skip of a filter.
// resume (a progress's Next) continues an interrupted run.
func (d *dash) redriveAcross(w http.ResponseWriter, r *http.Request) {
	consumer, errText := r.PostFormValue("consumer"), r.PostFormValue("error")
	action := redisstore.RedriveAction(r.PostFormValue("action"))
	if action != redisstore.Retry && action != redisstore.Skip {
		w.WriteHeader(http.StatusBadRequest)
		d.render(w, "error", map[string]any{"Error": "action must be retry or skip"})
		return
	}
	before := time.Time{}
	if ms, err := strconv.ParseInt(r.PostFormValue("before"), 10, 64); err == nil {
		before = time.UnixMilli(ms)
	}
	if r.PostFormValue("confirm") != "1" {
		cctx, cancel := d.call(r)
		page, err := d.a.store.DeadLettersAcross(cctx, redisstore.DeadLetterQuery{Consumer: consumer, Error: errText, Limit: dashboardPage})
		cancel()
		if err != nil {
			d.fail(w, err)
			return
		}
		d.render(w, "dead_job", map[string]any{"Title": "Confirm", "Confirm": true, "Action": string(action), "Consumer": consumer, "Error": errText,
			"Count": len(page.DeadLetters), "More": page.Next != "", "Before": d.a.env.Now().UnixMilli(), "Resume": r.PostFormValue("resume")})
		return
	}
	if before.IsZero() {
		before = d.a.env.Now()
	}
	d.jobs.mu.Lock()
	d.jobs.next++
	job := &redriveJob{ID: strconv.Itoa(d.jobs.next), Consumer: consumer, Error: errText, Action: action, Before: before}
	job.progress.Next = r.PostFormValue("resume")
	d.jobs.byID[job.ID] = job
	d.jobs.mu.Unlock()
	go d.runRedrive(job)
	http.Redirect(w, r, "/dead/job?id="+job.ID, http.StatusSeeOther)
}

// errBatchEnd stops RedriveAcross after one batch.
var errBatchEnd = errors.New("batch done")

// runRedrive runs job batch by batch until done or an error, which leaves
// the progress's Next to resume from.
func (d *dash) runRedrive(job *redriveJob) {
	a := d.a
	for {
		job.mu.Lock()
		next := job.progress.Next
		job.mu.Unlock()
		var batch redisstore.RedriveProgress
		cctx, cancel := a.call(context.Background())
		_, err := a.store.RedriveAcross(cctx, redisstore.RedriveAcrossRequest{
			Consumer: job.Consumer, Error: job.Error, Action: job.Action, Before: job.Before,
			After: next, Batch: dashboardPage, Consumers: a.store.Consumers(),
			Progress: func(p redisstore.RedriveProgress) error {
				batch = p
				return errBatchEnd
			},
		})
		cancel()
		job.mu.Lock()
		if err != nil && !errors.Is(err, errBatchEnd) {
			job.err, job.done = a.explain(err), true
			job.mu.Unlock()
			return
		}
		job.progress.Redriven += batch.Redriven
		job.progress.Missed += batch.Missed
		job.progress.Sessions += batch.Sessions
		job.progress.Next = batch.Next
		job.progress.Done = batch.Done || batch.Next == ""
		finished := job.progress.Done
		job.done = finished
		job.mu.Unlock()
		if finished {
			return
		}
	}
}

// jobView is a job's state as the job page and its JSON show it.
type jobView struct {
	ID       string `json:"id"`
	Action   string `json:"action"`
	Consumer string `json:"consumer"`
	Error    string `json:"error_filter"`
	Before   int64  `json:"before"`
	Redriven int    `json:"redriven"`
	Missed   int    `json:"missed"`
	Sessions int    `json:"sessions"`
	Next     string `json:"next"`
	Done     bool   `json:"done"`
	Failed   string `json:"failed"`
}

func (d *dash) job(r *http.Request) (jobView, bool) {
	d.jobs.mu.Lock()
	job := d.jobs.byID[r.URL.Query().Get("id")]
	d.jobs.mu.Unlock()
	if job == nil {
		return jobView{}, false
	}
	job.mu.Lock()
	defer job.mu.Unlock()
	p := job.progress
	return jobView{ID: job.ID, Action: string(job.Action), Consumer: job.Consumer, Error: job.Error, Before: job.Before.UnixMilli(),
		Redriven: p.Redriven, Missed: p.Missed, Sessions: p.Sessions, Next: p.Next, Done: job.done, Failed: job.err}, true
}

// redriveJobPage shows a bulk run's progress (app.js polls job.json).
func (d *dash) redriveJobPage(w http.ResponseWriter, r *http.Request) {
	v, ok := d.job(r)
	if !ok {
		w.WriteHeader(http.StatusNotFound)
		d.render(w, "error", map[string]any{"Error": "no such bulk run (runs live in the serving process)"})
		return
	}
	d.render(w, "dead_job", map[string]any{"Title": "Bulk " + v.Action, "Job": v})
}

// redriveJobJSON is a bulk run's progress as JSON.
func (d *dash) redriveJobJSON(w http.ResponseWriter, r *http.Request) {
	v, ok := d.job(r)
	if !ok {
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}
