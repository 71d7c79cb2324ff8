package atif

// validTimestamp reports whether s is an ISO 8601 timestamp in the extended
// forms gyre accepts:
//
//	YYYY-MM-DD
//	YYYY-MM-DD(T| )hh:mm[:ss[.f]][zone]
//
// with f 1 to 9 digits and zone "Z" or ±hh:mm. The date must exist
// (2025-02-29 does not) and hh ≤ 23, mm ≤ 59, ss ≤ 59, as Python's
// datetime.fromisoformat (what Harbor uses) requires. This is a strict
// subset of what Harbor accepts: every timestamp seen from real producers is
// RFC 3339, and Harbor also takes zone-less, date-only and space-separated
// forms, so gyre does too; it rejects the rarer forms Python 3.11 also parses
// (basic format 20251011T1000, week dates, hour-only times, comma decimals,
// offsets with seconds).
func validTimestamp(s string) bool {
	if len(s) < 10 || !digits(s[0:4]) || s[4] != '-' || !digits(s[5:7]) || s[7] != '-' || !digits(s[8:10]) {
		return false
	}
	year, month, day := num(s[0:4]), num(s[5:7]), num(s[8:10])
	if year < 1 || month < 1 || month > 12 || day < 1 || day > daysIn(year, month) {
		return false
	}
	s = s[10:]
	if s == "" {
		return true
	}
	if s[0] != 'T' && s[0] != ' ' {
		return false
	}
	s = s[1:]
	if len(s) < 5 || !digits(s[0:2]) || s[2] != ':' || !digits(s[3:5]) || num(s[0:2]) > 23 || num(s[3:5]) > 59 {
		return false
	}
	s = s[5:]
	if len(s) >= 3 && s[0] == ':' {
		if !digits(s[1:3]) || num(s[1:3]) > 59 {
			return false
		}
		s = s[3:]
		if len(s) > 0 && s[0] == '.' {
			n := 1
			for n < len(s) && s[n] >= '0' && s[n] <= '9' {
				n++
			}
			if n == 1 || n > 10 {
				return false
			}
			s = s[n:]
		}
	}
	switch {
	case s == "" || s == "Z":
		return true
	case len(s) == 6 && (s[0] == '+' || s[0] == '-') && digits(s[1:3]) && s[3] == ':' && digits(s[4:6]):
		return num(s[1:3]) <= 23 && num(s[4:6]) <= 59
	}
	return false
}

func digits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

func num(s string) int {
	n := 0
	for i := 0; i < len(s); i++ {
		n = n*10 + int(s[i]-'0')
	}
	return n
}

func daysIn(year, month int) int {
	switch month {
	case 2:
		if year%4 == 0 && (year%100 != 0 || year%400 == 0) {
			return 29
		}
		return 28
	case 4, 6, 9, 11:
		return 30
	}
	return 31
}
