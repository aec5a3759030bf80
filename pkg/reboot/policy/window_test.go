package policy

import (
	"strings"
	"testing"
	"time"
)

func mustWindow(t *testing.T, days []string, start, end, tz string) Window {
	t.Helper()
	w, err := ParseWindow(days, start, end, tz)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// at is a wall-clock time in zone tz.
func at(t *testing.T, tz, s string) time.Time {
	t.Helper()
	loc, err := time.LoadLocation(tz)
	if err != nil {
		t.Fatal(err)
	}
	v, err := time.ParseInLocation("2006-01-02 15:04:05", s, loc)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestWindowContains(t *testing.T) {
	// 2026-11-21 is a Saturday.
	tests := []struct {
		name             string
		days             []string
		start, end, zone string
		at               time.Time
		want             bool
	}{
		{name: "whole day, every day", start: "00:00", end: "00:00", zone: "UTC", at: at(t, "UTC", "2026-11-24 13:37:00"), want: true},
		{name: "whole day on a listed day", days: []string{"sat"}, start: "03:00", end: "03:00", zone: "UTC", at: at(t, "UTC", "2026-11-21 01:00:00"), want: true},
		{name: "whole day on another day", days: []string{"sat"}, start: "00:00", end: "00:00", zone: "UTC", at: at(t, "UTC", "2026-11-22 01:00:00"), want: false},
		{name: "start is inside", start: "02:00", end: "04:00", zone: "UTC", at: at(t, "UTC", "2026-11-24 02:00:00"), want: true},
		{name: "last second is inside", start: "02:00", end: "04:00", zone: "UTC", at: at(t, "UTC", "2026-11-24 03:59:59"), want: true},
		{name: "end is outside", start: "02:00", end: "04:00", zone: "UTC", at: at(t, "UTC", "2026-11-24 04:00:00"), want: false},
		{name: "before start", start: "02:00", end: "04:00", zone: "UTC", at: at(t, "UTC", "2026-11-24 01:59:59"), want: false},
		{name: "day not listed", days: []string{"mon", "wed"}, start: "02:00", end: "04:00", zone: "UTC", at: at(t, "UTC", "2026-11-24 03:00:00"), want: false},
		{name: "day listed, upper case", days: []string{"MON", "Tue"}, start: "02:00", end: "04:00", zone: "UTC", at: at(t, "UTC", "2026-11-24 03:00:00"), want: true},
		// The zone decides the day and the hour: 23:30 UTC on Monday is
		// 08:30 on Tuesday in Tokyo.
		{name: "zone decides the day", days: []string{"tue"}, start: "08:00", end: "09:00", zone: "Asia/Tokyo", at: at(t, "UTC", "2026-11-23 23:30:00"), want: true},
		{name: "zone decides the hour", start: "08:00", end: "09:00", zone: "Asia/Tokyo", at: at(t, "UTC", "2026-11-24 08:30:00"), want: false},

		// Across midnight: the window belongs to the day it opens on.
		{name: "midnight: evening of the listed day", days: []string{"sat"}, start: "22:00", end: "04:00", zone: "UTC", at: at(t, "UTC", "2026-11-21 23:00:00"), want: true},
		{name: "midnight: early next morning", days: []string{"sat"}, start: "22:00", end: "04:00", zone: "UTC", at: at(t, "UTC", "2026-11-22 03:00:00"), want: true},
		{name: "midnight: early morning of the listed day", days: []string{"sat"}, start: "22:00", end: "04:00", zone: "UTC", at: at(t, "UTC", "2026-11-21 03:00:00"), want: false},
		{name: "midnight: evening of the next day", days: []string{"sat"}, start: "22:00", end: "04:00", zone: "UTC", at: at(t, "UTC", "2026-11-22 23:00:00"), want: false},
		{name: "midnight: daytime", start: "22:00", end: "04:00", zone: "UTC", at: at(t, "UTC", "2026-11-24 12:00:00"), want: false},
		{name: "midnight: end is outside", start: "22:00", end: "04:00", zone: "UTC", at: at(t, "UTC", "2026-11-24 04:00:00"), want: false},
		{name: "midnight: midnight itself", start: "22:00", end: "04:00", zone: "UTC", at: at(t, "UTC", "2026-11-24 00:00:00"), want: true},
		// Saturday evening's window reaches Sunday morning across the
		// week's end (sat is 6, sun is 0).
		{name: "midnight: across the week's end", days: []string{"sat"}, start: "23:00", end: "01:00", zone: "UTC", at: at(t, "UTC", "2026-11-22 00:30:00"), want: true},

		// DST in Europe/Berlin: clocks go 02:00 CET -> 03:00 CEST on
		// 2026-03-29 and 03:00 CEST -> 02:00 CET on 2026-10-25 (Sundays).
		{name: "dst forward: window in the skipped hour never opens", start: "02:15", end: "02:45", zone: "Europe/Berlin", at: time.Date(2026, 3, 29, 0, 30, 0, 0, time.UTC) /* 01:30 CET */, want: false},
		{name: "dst forward: the instant after 01:59:59 CET is 03:00 CEST", start: "02:15", end: "02:45", zone: "Europe/Berlin", at: time.Date(2026, 3, 29, 1, 0, 0, 0, time.UTC), want: false},
		{name: "dst forward: window spanning the jump is open after it", start: "01:30", end: "03:30", zone: "Europe/Berlin", at: time.Date(2026, 3, 29, 1, 15, 0, 0, time.UTC) /* 03:15 CEST */, want: true},
		{name: "dst forward: and closes on the wall clock", start: "01:30", end: "03:30", zone: "Europe/Berlin", at: time.Date(2026, 3, 29, 1, 30, 0, 0, time.UTC) /* 03:30 CEST */, want: false},
		{name: "dst back: first 02:30 (CEST)", start: "02:00", end: "03:00", zone: "Europe/Berlin", at: time.Date(2026, 10, 25, 0, 30, 0, 0, time.UTC), want: true},
		{name: "dst back: between the two", start: "02:00", end: "03:00", zone: "Europe/Berlin", at: time.Date(2026, 10, 25, 0, 59, 59, 0, time.UTC), want: true},
		{name: "dst back: second 02:30 (CET)", start: "02:00", end: "03:00", zone: "Europe/Berlin", at: time.Date(2026, 10, 25, 1, 30, 0, 0, time.UTC), want: true},
		{name: "dst back: 03:00 CET closes it", start: "02:00", end: "03:00", zone: "Europe/Berlin", at: time.Date(2026, 10, 25, 2, 0, 0, 0, time.UTC), want: false},
		{name: "dst back: midnight window on the long night", days: []string{"sat"}, start: "22:00", end: "04:00", zone: "Europe/Berlin", at: time.Date(2026, 10, 25, 2, 30, 0, 0, time.UTC) /* Sun 03:30 CET */, want: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := mustWindow(t, tt.days, tt.start, tt.end, tt.zone)
			if got := w.Contains(tt.at); got != tt.want {
				t.Errorf("%s contains %s (%s) = %v, want %v", w, tt.at.UTC().Format(time.RFC3339), tt.at.In(w.loc).Format("Mon 15:04:05 MST"), got, tt.want)
			}
		})
	}
}

func TestParseWindowErrors(t *testing.T) {
	tests := []struct {
		name             string
		days             []string
		start, end, zone string
		want             []string // each error begins with its field
	}{
		{name: "every field bad", days: []string{"funday"}, start: "7am", end: "25:00", zone: "Mars/Olympus", want: []string{`days "funday"`, `start "7am"`, `end "25:00"`, `timeZone "Mars/Olympus"`}},
		{name: "seconds are refused", start: "02:00:00", end: "03:00", zone: "UTC", want: []string{`start "02:00:00"`}},
		{name: "empty times", start: "", end: "", zone: "UTC", want: []string{`start ""`, `end ""`}},
		{name: "local zone", start: "02:00", end: "03:00", zone: "Local", want: []string{`timeZone "Local"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseWindow(tt.days, tt.start, tt.end, tt.zone)
			if err == nil {
				t.Fatal("no error")
			}
			errs := err.(interface{ Unwrap() []error }).Unwrap()
			if len(errs) != len(tt.want) {
				t.Fatalf("errors = %q, want %d", err, len(tt.want))
			}
			for i, e := range errs {
				if !strings.HasPrefix(e.Error(), tt.want[i]) {
					t.Errorf("error %d = %q, want it to begin with %q", i, e, tt.want[i])
				}
			}
		})
	}
}

func TestZeroWindowNeverOpens(t *testing.T) {
	if (Window{}).Contains(time.Date(2026, 11, 24, 3, 0, 0, 0, time.UTC)) {
		t.Error("the zero Window opened; a Window must come from ParseWindow")
	}
}

func TestSchedule(t *testing.T) {
	mustWindow := func(days []string, start, end, tz string) Window {
		t.Helper()
		w, err := ParseWindow(days, start, end, tz)
		if err != nil {
			t.Fatal(err)
		}
		return w
	}
	mustException := func(from, to, tz string) Exception {
		t.Helper()
		e, err := ParseException(from, to, tz)
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	s := Schedule{
		Windows: []Window{
			mustWindow([]string{"sat"}, "22:00", "04:00", "Europe/Berlin"),
			mustWindow([]string{"wed"}, "12:00", "13:00", "UTC"),
		},
		Exceptions: []Exception{mustException("2026-12-20", "2027-01-03", "Europe/Berlin")},
	}
	at := func(s string) time.Time {
		t.Helper()
		v, err := time.Parse(time.RFC3339, s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	for _, tt := range []struct {
		at   string
		want bool
	}{
		{"2026-11-28T21:30:00Z", true},  // Saturday 22:30 in Berlin
		{"2026-11-29T02:59:00Z", true},  // Sunday 03:59 in Berlin: the Saturday window, past midnight
		{"2026-11-29T03:00:00Z", false}, // Sunday 04:00 in Berlin
		{"2026-11-25T12:30:00Z", true},  // Wednesday noon UTC
		{"2026-11-25T13:00:00Z", false},
		{"2026-12-26T21:30:00Z", false}, // a Saturday night inside the exception
		{"2027-01-03T22:59:00Z", false}, // 23:59 on 3 January in Berlin: still the exception
		{"2027-01-06T12:30:00Z", true},  // the first Wednesday after it
	} {
		if got := s.Contains(at(tt.at)); got != tt.want {
			t.Errorf("Contains(%s) = %v, want %v", tt.at, got, tt.want)
		}
	}
	for _, tt := range []struct{ from, want string }{
		{"2026-11-25T13:00:00Z", "2026-11-28T21:00:00Z"}, // Wednesday after noon: Saturday 22:00 Berlin
		{"2026-11-25T12:10:30Z", "2026-11-25T12:10:30Z"}, // inside: now
		{"2026-12-17T13:00:00Z", "2026-12-19T21:00:00Z"}, // the Saturday before the exception
		// Across the exception: the Saturday window of 2 January ends on
		// the 3rd, still excepted; the first opening after is Wednesday.
		{"2026-12-20T00:00:00Z", "2027-01-06T12:00:00Z"},
		{"2026-11-29T03:00:00.5Z", "2026-12-02T12:00:00Z"}, // a fraction past a minute
	} {
		got, ok := s.Next(at(tt.from))
		if !ok || !got.Equal(at(tt.want)) {
			t.Errorf("Next(%s) = %s %v, want %s", tt.from, got.UTC().Format(time.RFC3339Nano), ok, tt.want)
		}
	}
	closed := Schedule{Windows: s.Windows, Exceptions: []Exception{mustException("2026-01-01", "2027-12-31", "UTC")}}
	if got, ok := closed.Next(at("2026-06-01T00:00:00Z")); ok {
		t.Errorf("Next in a two-year freeze = %s, want none", got)
	}
	if got := s.String(); got != "sat 22:00-04:00 Europe/Berlin; wed 12:00-13:00 UTC; not 2026-12-20 to 2027-01-03 Europe/Berlin" {
		t.Errorf("String() = %q", got)
	}
}

func TestParseException(t *testing.T) {
	for _, tt := range []struct {
		from, to, tz, wantErr string
	}{
		{"2026-12-24", "", "", ""},
		{"2026-12-20", "2027-01-03", "Europe/Berlin", ""},
		{"2026-12-20", "2026-12-01", "", `to "2026-12-01": before from "2026-12-20"`},
		{"20.12.2026", "", "", `from "20.12.2026": want a date YYYY-MM-DD`},
		{"2026-12-20", "2026-1-3", "", `to "2026-1-3": want a date YYYY-MM-DD`},
		{"2026-12-20", "", "Local", `timeZone "Local"`},
		{"2026-12-20", "", "Mars/Olympus", `timeZone "Mars/Olympus"`},
	} {
		_, err := ParseException(tt.from, tt.to, tt.tz)
		if (err == nil) != (tt.wantErr == "") || (err != nil && !strings.Contains(err.Error(), tt.wantErr)) {
			t.Errorf("ParseException(%q, %q, %q) = %v, want %q", tt.from, tt.to, tt.tz, err, tt.wantErr)
		}
	}
}
