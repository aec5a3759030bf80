package policy

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// dayNames are the accepted day names, indexed by time.Weekday.
var dayNames = [7]string{"sun", "mon", "tue", "wed", "thu", "fri", "sat"}

// Window is when a reboot may start: days of the week and a time of day
// range in a time zone. Times are compared on the wall clock of that zone.
// On the day clocks go forward, a window that lies wholly in the skipped hour
// does not open; on the day they go back, a window in the repeated hour opens
// twice. Both follow from "between 02:00 and 03:00 local time", which is what
// an admin writes.
type Window struct {
	days       [7]bool
	start, end time.Duration // since midnight; end == start is the whole day
	loc        *time.Location
	text       string
}

// ParseWindow builds a Window from the config keys: days as sun..sat (empty
// means every day), start and end as "HH:MM", and an IANA time zone. Its
// error joins one error per bad field (errors.Join), each beginning with the
// field's key, so the caller can prefix the section.
func ParseWindow(days []string, start, end, timeZone string) (Window, error) {
	var errs []error
	w := Window{}
	if len(days) == 0 {
		for i := range w.days {
			w.days[i] = true
		}
	}
	for _, d := range days {
		i := dayIndex(d)
		if i < 0 {
			errs = append(errs, fmt.Errorf("days %q: not a day; use %s", d, strings.Join(dayNames[:], ", ")))
			continue
		}
		w.days[i] = true
	}
	var err error
	if w.start, err = parseClock(start); err != nil {
		errs = append(errs, fmt.Errorf("start %q: %w", start, err))
	}
	if w.end, err = parseClock(end); err != nil {
		errs = append(errs, fmt.Errorf("end %q: %w", end, err))
	}
	switch {
	case timeZone == "":
		errs = append(errs, errors.New(`timeZone: empty; use an IANA name such as UTC or Europe/Berlin`))
	case strings.EqualFold(timeZone, "Local"):
		// time.LoadLocation accepts "Local", the container's zone, which
		// is not the zone the admin sees on the host.
		errs = append(errs, errors.New(`timeZone "Local": the agent's container zone, not the host's; use an IANA name such as Europe/Berlin`))
	default:
		if w.loc, err = time.LoadLocation(timeZone); err != nil {
			errs = append(errs, fmt.Errorf("timeZone %q: %w; use an IANA name such as UTC or Europe/Berlin (the image carries tzdata)", timeZone, err))
		}
	}
	if len(errs) > 0 {
		return Window{}, errors.Join(errs...)
	}
	dayText := "every day"
	if len(days) > 0 {
		dayText = strings.ToLower(strings.Join(days, ","))
	}
	w.text = fmt.Sprintf("%s %s-%s %s", dayText, start, end, timeZone)
	return w, nil
}

func dayIndex(d string) int {
	for i, n := range dayNames {
		if strings.EqualFold(d, n) {
			return i
		}
	}
	return -1
}

// parseClock parses "HH:MM", 00:00 to 23:59.
func parseClock(s string) (time.Duration, error) {
	t, err := time.Parse("15:04", s)
	if err != nil || len(s) != 5 {
		return 0, errors.New("want a 24-hour time of day HH:MM, such as 02:00 or 22:30")
	}
	return time.Duration(t.Hour())*time.Hour + time.Duration(t.Minute())*time.Minute, nil
}

// String says the window as configured, for conditions and logs:
// "mon,tue 22:00-04:00 Europe/Berlin".
func (w Window) String() string { return w.text }

// Contains says whether a reboot may start at t. A window that crosses
// midnight belongs to the day it opens on: with days [sat] and 22:00-04:00,
// Sunday 03:00 is inside and Saturday 03:00 is not.
func (w Window) Contains(t time.Time) bool {
	if w.loc == nil {
		return false // the zero Window, never parsed, opens never
	}
	local := t.In(w.loc)
	tod := time.Duration(local.Hour())*time.Hour + time.Duration(local.Minute())*time.Minute + time.Duration(local.Second())*time.Second
	today := local.Weekday()
	yesterday := (today + 6) % 7
	switch {
	case w.start == w.end:
		return w.days[today]
	case w.start < w.end:
		return w.days[today] && tod >= w.start && tod < w.end
	default: // crosses midnight
		return (w.days[today] && tod >= w.start) || (w.days[yesterday] && tod < w.end)
	}
}

// Exception is a run of dates on which no reboot starts, whatever the
// windows say: from and to inclusive, as dates in a time zone.
type Exception struct {
	from, to string // YYYY-MM-DD, compared as text
	loc      *time.Location
	text     string
}

// ParseException builds an Exception from reboot.exceptions' keys: from and
// to as YYYY-MM-DD (to not before from; to empty means the same day), and
// an IANA time zone (empty means UTC).
func ParseException(from, to, timeZone string) (Exception, error) {
	var errs []error
	if to == "" {
		to = from
	}
	for _, d := range []struct{ key, v string }{{"from", from}, {"to", to}} {
		if _, err := time.Parse(time.DateOnly, d.v); err != nil || len(d.v) != len(time.DateOnly) {
			errs = append(errs, fmt.Errorf("%s %q: want a date YYYY-MM-DD, such as 2026-12-20", d.key, d.v))
		}
	}
	if len(errs) == 0 && to < from {
		errs = append(errs, fmt.Errorf("to %q: before from %q", to, from))
	}
	if timeZone == "" {
		timeZone = "UTC"
	}
	loc, err := loadZone(timeZone)
	if err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return Exception{}, errors.Join(errs...)
	}
	text := from
	if to != from {
		text += " to " + to
	}
	return Exception{from: from, to: to, loc: loc, text: text + " " + timeZone}, nil
}

// Contains says whether t falls on one of the exception's dates.
func (e Exception) Contains(t time.Time) bool {
	if e.loc == nil {
		return false
	}
	d := t.In(e.loc).Format(time.DateOnly)
	return d >= e.from && d <= e.to
}

func (e Exception) String() string { return e.text }

// loadZone loads an IANA zone, refusing "Local" (the container's zone).
func loadZone(timeZone string) (*time.Location, error) {
	if strings.EqualFold(timeZone, "Local") {
		return nil, errors.New(`timeZone "Local": the agent's container zone, not the host's; use an IANA name such as Europe/Berlin`)
	}
	loc, err := time.LoadLocation(timeZone)
	if err != nil {
		return nil, fmt.Errorf("timeZone %q: %w; use an IANA name such as UTC or Europe/Berlin (the image carries tzdata)", timeZone, err)
	}
	return loc, nil
}

// Schedule is when a reboot may start: inside any of its windows, and on
// none of its exceptions' dates.
type Schedule struct {
	Windows    []Window
	Exceptions []Exception
}

// Contains says whether a reboot may start at t.
func (s Schedule) Contains(t time.Time) bool {
	for _, e := range s.Exceptions {
		if e.Contains(t) {
			return false
		}
	}
	for _, w := range s.Windows {
		if w.Contains(t) {
			return true
		}
	}
	return false
}

// MaxLookAhead bounds Next's search.
const MaxLookAhead = 62 * 24 * time.Hour

// Next returns the first minute from t on at which a reboot may start, and
// false when there is none within MaxLookAhead (every window lies in
// exceptions that long, or there is no window). Windows open on whole
// minutes, so a minute's steps find every opening.
func (s Schedule) Next(t time.Time) (time.Time, bool) {
	at := t.Truncate(time.Minute)
	if at.Before(t) {
		at = at.Add(time.Minute)
	}
	if s.Contains(t) {
		return t, true
	}
	for end := t.Add(MaxLookAhead); !at.After(end); at = at.Add(time.Minute) {
		if s.Contains(at) {
			return at, true
		}
	}
	return time.Time{}, false
}

// String says the schedule as configured: "mon 22:00-04:00 UTC; sat
// 00:00-00:00 UTC; not 2026-12-20 to 2027-01-03 UTC".
func (s Schedule) String() string {
	parts := make([]string, 0, len(s.Windows)+len(s.Exceptions))
	for _, w := range s.Windows {
		parts = append(parts, w.String())
	}
	for _, e := range s.Exceptions {
		parts = append(parts, "not "+e.String())
	}
	return strings.Join(parts, "; ")
}
