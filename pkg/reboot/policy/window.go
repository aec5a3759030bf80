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
