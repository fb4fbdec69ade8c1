/// The wall clock in the machine's time zone, as schedules read it (agent.conf's `limit-rate=`
/// windows are local time, as BITS' group policy has them).
package enum LocalTime {
    /// The day of the week (0 is Sunday ... 6 Saturday) and minute of the day (0...1439) of an
    /// instant given as seconds since the epoch; nil when the C library cannot convert it.
    package static func weekdayAndMinute(secondsSinceEpoch: Int64) -> (weekday: Int, minuteOfDay: Int)? {
        Syscall.localWeekdayAndMinute(secondsSinceEpoch: secondsSinceEpoch)
    }
}
