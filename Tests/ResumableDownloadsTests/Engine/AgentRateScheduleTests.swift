import Foundation
import Testing
@testable import ResumableDownloads

/// The agent's one limit over every connection (issue 32 item 2), against a simulated engine:
/// connections offer chunks, a refused one asks again at the instant it was given, and the
/// engine visits due connections in the same order every time (as its dictionary does), so an
/// unfair schedule would show.
@Suite struct AgentRateScheduleTests {
    typealias Instant = ContinuousClock.Instant
    let t0 = ContinuousClock.now

    /// A connection of a job, offering `chunk` bytes whenever it is not paused; `serverRate`
    /// bounds what its server sends (nil: as fast as it is allowed).
    struct Connection {
        var job: UUID
        var priority: Float
        var chunk = 16 << 10
        var serverRate: Double?
        var askAt: Instant
        var received = 0
        /// A slow server's bytes wait in the socket: what a chunk holds is what came since the last.
        var lastTaken: Instant? = nil

        func offer(at now: Instant) -> Int {
            guard let serverRate, let lastTaken else { return chunk }
            return max(1024, min(128 << 10, Int(serverRate * (now - lastTaken).asSeconds)))
        }
    }

    /// Runs `connections` from `start` for `duration` and returns them with what they got;
    /// `change` may alter the schedule at one instant.
    func simulate(_ schedule: inout AgentRateSchedule, _ connections: [Connection], from start: Instant, for duration: Duration,
                  change: (at: Instant, (inout AgentRateSchedule, Instant) -> Void)? = nil) -> [Connection] {
        var connections = connections
        var now = start
        var changed = false
        let end = start + duration
        while true {
            // The engine wakes at the earliest due connection, up to a millisecond late.
            guard let next = connections.map(\.askAt).min(), next < end else { break }
            now = max(now, next) + .microseconds(300)
            if let change, !changed, now >= change.at {
                change.1(&schedule, now)
                changed = true
            }
            for index in connections.indices where connections[index].askAt <= now {
                var connection = connections[index]
                let offer = connection.offer(at: now)
                if let resume = schedule.admit(offer, job: connection.job, priority: connection.priority, at: now) {
                    #expect(resume > now - .milliseconds(100))
                    connection.askAt = max(resume, now + .microseconds(1))
                } else {
                    connection.received += offer
                    connection.lastTaken = now
                    // The next chunk: at once from a fast server, later from a slow one.
                    let gap = connection.serverRate.map { Duration.nanoseconds(Int64(Double(connection.chunk) / $0 * 1e9)) }
                    connection.askAt = now + (gap ?? .microseconds(50))
                }
                connections[index] = connection
            }
        }
        return connections
    }

    func greedy(_ count: Int, job: UUID = UUID(), priority: Float = 0.5) -> [Connection] {
        (0..<count).map { _ in Connection(job: job, priority: priority, askAt: t0) }
    }

    func total(_ connections: [Connection], job: UUID? = nil) -> Double {
        Double(connections.filter { job == nil || $0.job == job }.map(\.received).reduce(0, +))
    }

    @Test(arguments: [1 << 20, 4 << 20, 16 << 20])
    func sixteenConnectionsTogetherHoldTheLimit(limit: Int) {
        var schedule = AgentRateSchedule(bytesPerSecond: Int64(limit))
        let connections = (0..<4).flatMap { _ in greedy(4) }
        let result = simulate(&schedule, connections, from: t0, for: .seconds(10))
        let rate = total(result) / 10
        #expect(rate <= Double(limit) * 1.01 && rate >= Double(limit) * 0.97, "\(rate) B/s under \(limit)")
    }

    @Test func jobsShareTheLimitNotConnections() {
        var schedule = AgentRateSchedule(bytesPerSecond: 4 << 20)
        let wide = UUID(), narrow = UUID()
        let result = simulate(&schedule, greedy(8, job: wide) + greedy(1, job: narrow), from: t0, for: .seconds(10))
        let (w, n) = (total(result, job: wide), total(result, job: narrow))
        #expect(abs(w - n) / (w + n) < 0.05, "8 connections got \(w), 1 connection \(n)")
    }

    @Test func aHigherClassIsPaidFirstAndLeavesTheRest() {
        var schedule = AgentRateSchedule(bytesPerSecond: 4 << 20)
        let high = UUID(), low = UUID()
        let both = simulate(&schedule, greedy(2, job: low, priority: 0.25) + greedy(2, job: high, priority: 0.75),
                            from: t0, for: .seconds(10))
        #expect(total(both, job: high) >= 0.95 * total(both), "high \(total(both, job: high)) of \(total(both))")
        // A high job its server holds to 1 MiB/s leaves the other 3 MiB/s to the low one.
        var second = AgentRateSchedule(bytesPerSecond: 4 << 20)
        var slow = greedy(1, job: high, priority: 1)
        slow[0].serverRate = Double(1 << 20)
        let shared = simulate(&second, slow + greedy(2, job: low, priority: 0.25), from: t0, for: .seconds(10))
        #expect(abs(total(shared, job: high) / 10 - Double(1 << 20)) < Double(1 << 20) * 0.05)
        #expect(abs(total(shared) / 10 - Double(4 << 20)) < Double(4 << 20) * 0.03, "total \(total(shared) / 10)")
    }

    @Test func aLiveChangeShowsWithinASecond() {
        for (before, after) in [(Int64(1 << 20), Int64(16 << 20)), (Int64(16 << 20), Int64(1 << 20))] {
            var schedule = AgentRateSchedule(bytesPerSecond: before)
            let connections = greedy(16)
            let warm = simulate(&schedule, connections, from: t0, for: .seconds(2))
            let switchAt = t0 + .seconds(2)
            var warmed = warm
            for index in warmed.indices { warmed[index].received = 0 }
            // The second after the change: within 5 % of the new limit.
            let result = simulate(&schedule, warmed, from: switchAt, for: .seconds(1),
                                  change: (switchAt, { schedule, now in schedule.setLimit(after, at: now) }))
            let rate = total(result)
            #expect(abs(rate - Double(after)) < Double(after) * 0.07, "\(before) -> \(after): \(rate) B/s in the first second")
        }
    }

    @Test func noLimitTakesEverythingAndIdleEarnsLittle() {
        var schedule = AgentRateSchedule()
        #expect(schedule.admit(1 << 30, job: UUID(), priority: 0.5, at: t0) == nil)
        schedule.setLimit(1 << 20, at: t0)
        let job = UUID()
        #expect(schedule.admit(64 << 10, job: job, priority: 0.5, at: t0) == nil)
        // A minute idle: at most `slack` of credit, then the schedule again.
        let later = t0 + .seconds(60)
        var taken = 0
        while schedule.admit(16 << 10, job: job, priority: 0.5, at: later) == nil { taken += 16 << 10 }
        #expect(Double(taken) <= Double(1 << 20) * AgentRateSchedule.slack.asSeconds + Double(16 << 10))
        schedule.setLimit(nil, at: later)
        #expect(schedule.admit(1 << 30, job: job, priority: 0.5, at: later) == nil)
    }
}

private extension Duration {
    var asSeconds: Double {
        let parts = components
        return Double(parts.seconds) + Double(parts.attoseconds) / 1e18
    }
}
