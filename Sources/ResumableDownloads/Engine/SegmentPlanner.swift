import FoundationEssentials
import ReachabilityBase

/// Which byte ranges one download attempt fetches over which connections and paths, as a pure
/// state machine: fed what the connections did (a response accepted, bytes stored, a range
/// finished, a connection lost), path changes and a periodic tick, it answers with the requests
/// to open, the ends to move and the connections to close. It touches no socket, file or clock.
///
/// The rules it holds:
/// - **One connection until the server has shown it can do more.** Segments need a known length
///   and either a strong validator or an expected SHA-256 (`allowsSegments`, decided by the
///   executor from the first response or the resume data). The first extra connection is the
///   test: its range must come back as a 206 with the right Content-Range and the same
///   validator; anything else (`rangeRefused`) switches segments off for the attempt while the
///   first connection carries on.
/// - **Adaptive.** Connections are added in rounds, only while the rest of the download would
///   take longer than `minimumRemainingTime` and the disk keeps up (no backpressure). A first
///   connection at `lineRate`, or at `slowRate` without a cap's signs (silent over `quietShare` of
///   the engine's ticks, as a server pacing in bursts), gets no test connection on its path. A round adds
///   a connection on a path not used yet, or doubles the connections of a path in use; once a
///   round showed a **per-connection cap** (each added connection carried at least `capShare` of
///   what an older one carried over the same span, and the older ones kept `capShare` of their
///   rate before), the next round opens every connection allowed at once, as aria2c does. A
///   round is judged once its connections have delivered for a judgement span: at least
///   `minimumJudgement`, a window, and `burstsPerJudgement` times the longest silence any
///   connection on the path showed (a server pacing in bursts, the writer pausing), at most
///   `maximumJudgement`. It is kept on a cap, or when the aggregate rate grew by `newPathGain` of
///   itself (a new path) or by `usefulGain` of the path's average connection for each connection
///   added. Otherwise the added connections are closed and the path counts as full (tried again
///   after `reprobeInterval`), except that a round on a path already seen capped is measured
///   again (`remeasures` times) first: one noisy span never parks a capped path. A
///   server with no per-connection cap gains nothing from a second connection, so a download
///   from it keeps one.
/// - **Work stealing.** A connection that finishes its range takes the first range nobody holds,
///   else a piece from the end of the range expected to finish last: at most a chunk
///   (`chunkDuration` at its rate) and its fair share of the rest, split at `alignment`
///   boundaries so both finish together at their measured rates, never leaving a piece under
///   `minimumSegment` (in the tail, under `alignment`, and only from a holder busy for longer than
///   `tailSteal`). Pieces from the end keep connections open: only the holder's request is cut,
///   once, and the thief's ends with its range, so its connection serves the next piece. A
///   connection that reaches its end goes on in place when the bytes after it are free or held by
///   one that has not delivered a byte yet (closed then: a server slow to answer new connections
///   never holds up one that flows). A connection suspected of stalling, or on a path that went
///   away, is closed and its range taken over at once. The last bytes never wait on one slow
///   connection.
/// - **Seams.** Where two responses meet, the one that comes second compares `seamOverlap`
///   bytes across the boundary with the disk (a resume's overlap before its start, or the bytes
///   past its end that its neighbour stored). Every range boundary is a seam until the executor
///   reports it verified; a grown set is handed out (`seamsChanged`) before the requests that
///   grew it, so it is kept with the resume data before their first byte; the attempt completes
///   only once every seam was compared (left-over ones by small `verifySeam` requests). A
///   mismatch restarts the download.
/// - **Paths.** Cheap paths before expensive ones. An expensive path is tried only after the
///   cheap ones stop gaining and dropped when its share falls under `newPathGain` of the total
///   (with `ExpensiveUse.fallbackOnly`, used only while no cheap path is usable). A path that
///   appears gets a connection at once.
//
// Longer than 400 lines on purpose: one pure state machine whose every input reads and writes the
// same private connection table, rounds and meters; its vocabulary is in SegmentPlanner+Types.swift
// and its executor in TransferEngine+Segments.swift.
struct SegmentPlanner: Sendable {
    typealias Instant = ContinuousClock.Instant

    private struct Round: Sendable, Hashable {
        var path: Path
        var isNewPath: Bool
        /// The aggregate and the path's rate before, and the path's connection count.
        var before: Double
        var pathBefore: Double
        var pathCountBefore: Int
        var added: [Int]
        var startedAt: Instant
        /// When the last added connection delivered its first byte (or a new measurement began).
        var measuredFrom: Instant?
        /// Measurements started again after one that read as no gain.
        var remeasured = 0
    }

    let configuration: Configuration
    private(set) var total: Int64?
    /// Bytes stored (by this attempt's connections or before it).
    private(set) var stored = RangeSet<Int64>()
    /// Range boundaries not yet compared across.
    private(set) var seams = Set<Int64>()
    private(set) var capability: Capability = .untested
    /// Whether splitting is allowed (nil until the first answer or the resume data says).
    private(set) var allowsSegments: Bool?
    private(set) var paths: [Path] = [.routingTable]
    private(set) var connections: [Int: Connection] = [:]
    /// Connections each path should hold.
    private(set) var targets: [Path: Int] = [:]
    /// Paths that gained nothing from their last round, and since when.
    private var fullPaths: [Path: Instant] = [:]
    /// Paths whose server was seen capping each connection: the next round opens all allowed.
    private(set) var cappedPaths = Set<Path>()
    /// The aggregate and the path's rate over the last kept round's judgement span: the next
    /// round's "before" (a fresh short span of a bursty server would read anything).
    private var lastJudged: (at: Instant, path: Path, aggregate: Double, onPath: Double)?
    private var round: Round?
    private var meter = ThroughputWindow()
    private var pathMeters: [Path: ThroughputWindow] = [:]
    /// When the connection set last changed.
    private var changedAt: Instant?
    private var lastBackpressure: Instant?
    /// The last tick at which the writer held the transfers: a rate measured over it reads low.
    private var lastWriterPause: Instant?
    /// The last tick (cap signs count ticks that follow one closely).
    private var lastTickAt: Instant?
    private var nextID = 1
    private var isStarted = false
    private var startedAt: Instant?
    private(set) var isComplete = false
    /// Shrinks decided while choosing ranges, emitted before the requests that take the bytes.
    private var shrinks: [Action] = []
    /// The connections the server last served before it said it was busy: growth past it goes
    /// one connection a round.
    private var serverLimit: Int?
    /// Paths whose connection went silent while others delivered (a path that fails without the
    /// kernel knowing): tried again after `stalledReprobe`, not `reprobeInterval`.
    private var stalledPaths = Set<Path>()
    static let stalledReprobe: Duration = .seconds(1)

    /// Connections lost while delivering, waiting to be replaced (`transport` endings).
    private var lost: [(path: Path, at: Instant)] = []
    /// How long a lost connection waits for evidence that the others still get through.
    static let replacementDelay: Duration = .milliseconds(150)

    /// Failed checks per seam.
    private var seamCheckFailures: [Int64: Int] = [:]
    /// This download's share of the per-host bound (`allowance`).
    private(set) var allowance = Int.max

    /// The round trip to the server, once a connection measured it (`roundTrip`).
    private var roundTrip: Duration?

    /// How long a connection count is measured: `evaluationWindow` until the round trip is
    /// known, then eight round trips (a new TCP connection needs several to reach its rate),
    /// within `minimumWindow` and `maximumWindow`.
    var window: Duration {
        guard let roundTrip else { return configuration.evaluationWindow }
        return min(configuration.maximumWindow, max(configuration.minimumWindow, roundTrip * 8))
    }

    /// Most connections now: the configured maximum within the allowance.
    var maximumConnections: Int { max(1, min(configuration.maximumConnections, allowance)) }

    init(configuration: Configuration) {
        self.configuration = configuration
    }

    /// Bytes stored so far.
    var storedBytes: Int64 { stored.ranges.reduce(0) { $0 + ($1.upperBound - $1.lowerBound) } }

    /// Data connections open now (seam checks not counted).
    var connectionCount: Int { connections.values.filter { !$0.isSeamCheck }.count }

    /// The paths that carry connections now, best first.
    var activePaths: [Path] { paths.filter { path in connections.values.contains { $0.path == path } } }

    /// Whether ranges are being split over several connections (or may be).
    var isSegmenting: Bool {
        capability != .refused && allowsSegments == true && total != nil && configuration.maximumConnections > 1
    }

    /// The aggregate rate over the evaluation window.
    func bytesPerSecond(at now: Instant) -> Double { meter.bytesPerSecond(over: window, at: now) }

    /// The bytes of the entity nobody holds and nobody stored.
    var unassigned: RangeSet<Int64> {
        var free = RangeSet<Int64>(0..<(total ?? Int64.max))
        free.subtract(stored)
        for connection in connections.values where !connection.isSeamCheck && connection.end > connection.position {
            free.remove(contentsOf: connection.position..<connection.end)
        }
        return free
    }

    // MARK: accounting (hot: called for every gathered chunk, no actions)

    /// Connection `id` stored bytes up to `position`.
    mutating func record(position: Int64, of id: Int, at now: Instant) {
        guard var connection = connections[id], !connection.isSeamCheck, position > connection.position else { return }
        let count = position - connection.position
        if let last = connection.lastByteAt {
            // A server pacing in bursts (or a writer pause) shows as silences between deliveries.
            connection.longestGap = max(connection.longestGap, now - last)
        }
        if connection.firstByteAt == nil {
            connection.firstByteAt = now
            if let round, round.added.contains(id),
               round.added.allSatisfy({ $0 == id || connections[$0]?.firstByteAt != nil || connections[$0] == nil }) {
                self.round?.measuredFrom = now
            }
        }
        stored.insert(contentsOf: connection.position..<position)
        connection.position = position
        connection.lastByteAt = now
        connection.meter.add(count, at: now)
        connections[id] = connection
        meter.add(count, at: now)
        pathMeters[connection.path, default: ThroughputWindow()].add(count, at: now)
    }

    // MARK: inputs

    mutating func handle(_ input: Input, now: Instant) -> [Action] {
        switch input {
        case .start(let stored, let seams, let total, let allowsSegments, let paths):
            return started(stored: stored, seams: seams, total: total, allowsSegments: allowsSegments, paths: paths, now: now)

        case .accepted(let id, let total, let isRange, let allows):
            return accepted(id, total: total, isRange: isRange, allowsSegments: allows, now: now)

        case .reachedEnd(let id):
            return reachedEnd(id)

        case .ended(let id, let ending):
            return ended(id, ending, now: now)

        case .seamVerified(let offset):
            guard seams.remove(offset) != nil else { return [] }
            return connectionCount == 0 ? finishIfDone(now: now) : []

        case .seamMismatch(let offset):
            return closeAll() + [.restart(reason:
                "the bytes at offset \(offset) differ between two responses: the server sends different versions on different connections")]

        case .stallSuspected(let id):
            return stallSuspected(id, now: now)

        case .pathsChanged(let paths):
            return pathsChanged(paths, now: now)

        case .backpressure:
            lastBackpressure = now
            forgetTicks()
            return []

        case .writerPaused:
            lastWriterPause = now
            forgetTicks()
            return []

        case .restartedInPlace(let id, let total, let allows):
            return restartedInPlace(id, total: total, allowsSegments: allows, now: now)

        case .allowance(let count):
            allowance = max(1, count)
            return shed(now: now)

        case .roundTrip(let duration):
            // The smallest seen: queueing behind other connections only adds to it.
            if duration > .zero { roundTrip = min(roundTrip ?? duration, duration) }
            return []

        case .tick:
            return tick(now: now)
        }
    }

    /// The first `start`: what is stored, the seams to verify, the size when known, the paths.
    private mutating func started(stored: RangeSet<Int64>, seams: Set<Int64>, total: Int64?, allowsSegments: Bool?,
                                  paths: [Path], now: Instant) -> [Action] {
        guard !isStarted else { return [] }
        isStarted = true
        self.stored = stored
        self.seams = seams
        self.total = total
        self.allowsSegments = allowsSegments.map { $0 && total != nil }
        self.paths = paths
        startedAt = now
        meter.mark(at: now)
        if let first = preferredPaths.first { targets = [first: 1] }
        return fill(now: now)
    }

    /// A response was accepted: it may tell the size and whether ranges work.
    private mutating func accepted(_ id: Int, total: Int64?, isRange: Bool, allowsSegments allows: Bool,
                                   now: Instant) -> [Action] {
        guard let connection = connections[id] else { return [] }
        if self.total == nil, let total {
            self.total = total
            for key in connections.keys {
                connections[key]!.end = min(connections[key]!.end, total)
                connections[key]!.coveredEnd = min(connections[key]!.coveredEnd, total)
            }
        }
        if allowsSegments == nil { allowsSegments = allows && self.total != nil }
        if isRange, capability == .untested, connection.start > 0 {
            capability = .shown
            if configuration.opensAllAtOnce { return openAll(on: connection.path, now: now) }
        }
        return []
    }

    /// The caller asked for its connection count (`opensAllAtOnce`) and the server has shown it
    /// serves ranges: every connection allowed opens now on `path`, as `aria2c -x N` does, and
    /// is not judged (the test's round ends here, kept).
    private mutating func openAll(on path: Path, now: Instant) -> [Action] {
        guard isSegmenting else { return [] }
        if let round, round.path == path { self.round = nil }
        cappedPaths.insert(path)
        targets[path] = count(on: path) + max(0, maximumConnections - connectionCount)
        changedAt = now
        return fill(now: now)
    }

    /// The one connection restarted from zero (a new version): everything stored is void.
    private mutating func restartedInPlace(_ id: Int, total: Int64?, allowsSegments allows: Bool, now: Instant) -> [Action] {
        guard var connection = connections[id], connectionCount == 1 else { return [] }
        self.total = total
        allowsSegments = allows && total != nil
        capability = .untested
        stored = RangeSet()
        seams = []
        connection.start = 0
        connection.position = 0
        connection.end = total ?? Int64.max
        connection.coveredEnd = connection.end
        connections = [id: connection]
        round = nil
        changedAt = now
        return [.seamsChanged([])]
    }

    // MARK: paths

    /// Usable paths in the order connections go to them: cheap ones first, then expensive ones
    /// (none with `fallbackOnly` while a cheap one is usable).
    private var preferredPaths: [Path] {
        let cheap = paths.filter { !$0.isExpensive }
        if configuration.expensiveUse == .fallbackOnly, !cheap.isEmpty { return cheap }
        return cheap + paths.filter(\.isExpensive)
    }

    private func count(on path: Path) -> Int {
        connections.values.filter { $0.path == path && !$0.isSeamCheck }.count
    }

    private func rate(of connection: Connection, at now: Instant) -> Double {
        connection.meter.bytesPerSecond(over: window * 2, at: now)
    }

    /// The receive buffer for connection `id` (`Configuration.receiveSpan`): nil while its path
    /// has not shown a per-connection cap (an uncapped connection keeps the kernel's autotuning,
    /// which a fast path needs) or no connection on it delivered for two seconds yet. The cap is
    /// the rate of the path's longest-delivering connection after its first second, over at most
    /// the last 4 s: nginx's `limit_rate` gives a new connection a second's worth at once, which
    /// over a short window read 10 times the cap (a 2 MB/s cap measured 22 MB/s on loopback).
    func receiveBuffer(for id: Int, at now: Instant) -> Int? {
        guard let connection = connections[id], !connection.isSeamCheck, cappedPaths.contains(connection.path) else { return nil }
        let oldest = connections.values.filter { $0.path == connection.path && !$0.isSeamCheck && $0.firstByteAt != nil }
            .min { $0.firstByteAt! < $1.firstByteAt! }
        guard let oldest, let first = oldest.firstByteAt, now - first >= .seconds(2) else { return nil }
        let cap = oldest.meter.bytesPerSecond(over: min(ThroughputWindow.span, now - first - .seconds(1)), at: now)
        guard cap > 0 else { return nil }
        let span = max(configuration.receiveSpan, (roundTrip ?? .zero) * 4)
        let bytes = cap * span.timeInterval
        return Int(min(Double(configuration.largestReceiveBuffer), max(Double(configuration.smallestReceiveBuffer), bytes)))
    }

    // MARK: opening

    /// Opens connections until every path holds its target (within the maximum): free ranges
    /// first, then stolen parts. The grown seam set comes first, then the shrinks, then the opens.
    private mutating func fill(now: Instant) -> [Action] {
        let seamsBefore = seams
        var opens: [Request] = []
        for path in preferredPaths {
            while count(on: path) < (targets[path] ?? 0), connectionCount < maximumConnections,
                  let request = nextRequest(on: path, now: now) {
                opens.append(request)
            }
        }
        // A thief may have split a connection opened in this same batch: its request goes out
        // with the shorter range instead of a shrink before it exists.
        var stolen: [Action] = []
        for case .setEnd(let victim, let end) in shrinks {
            if let index = opens.firstIndex(where: { $0.connection == victim }) {
                opens[index].range = opens[index].range.lowerBound..<end
                connections[victim]!.coveredEnd = min(total ?? Int64.max, end + configuration.seamOverlap)
            } else {
                stolen.append(.setEnd(connection: victim, end: end))
            }
        }
        shrinks = []
        if opens.isEmpty, connectionCount == 0 { return finishIfDone(now: now) }
        return (seams != seamsBefore ? [.seamsChanged(seams)] : []) + stolen + opens.map { .open($0) }
    }

    /// The next range for a new connection on `path`: the first free range, else a stolen part.
    private mutating func nextRequest(on path: Path, now: Instant) -> Request? {
        let limit = total ?? Int64.max
        if let gap = unassigned.ranges.first, gap.lowerBound < limit {
            // Without segments only one connection runs, fetching to the gap's end.
            guard connectionCount == 0 || isSegmenting else { return nil }
            return open(path: path, range: gap.lowerBound..<gap.upperBound, now: now)
        }
        guard isSegmenting, capability == .shown || connectionCount == 1,
              let (victim, split) = stealTarget(for: path, now: now) else { return nil }
        let oldEnd = connections[victim]!.end
        connections[victim]!.end = split
        shrinks.append(.setEnd(connection: victim, end: split))
        return open(path: path, range: split..<oldEnd, now: now)
    }

    private mutating func open(path: Path, range: Range<Int64>, now: Instant, seam: Int64? = nil) -> Request {
        let id = nextID
        nextID += 1
        let limit = total ?? Int64.max
        let covered = range.upperBound >= limit ? limit : min(limit, range.upperBound + configuration.seamOverlap)
        var connection = Connection(id: id, path: path, start: range.lowerBound, position: range.lowerBound,
                                    end: range.upperBound, coveredEnd: covered, openedAt: now, seam: seam)
        connection.meter.mark(at: now)
        connections[id] = connection
        if seam == nil {
            if range.lowerBound > 0 { seams.insert(range.lowerBound) }
            if range.upperBound < limit { seams.insert(range.upperBound) }
        }
        return Request(connection: id, path: path, range: range)
    }

    /// The connection expected to finish last and where to split it: so that it and a thief at
    /// the thief's expected rate (its path's average connection, else everyone's) end together.
    /// Without measured rates both are taken as equal.
    private func stealTarget(for path: Path, now: Instant) -> (Int, Int64)? {
        let running = connections.values.filter { !$0.isSeamCheck }
        let rates = running.map { rate(of: $0, at: now) }
        let onPath = running.filter { $0.path == path }.map { rate(of: $0, at: now) }
        let measured = (onPath.isEmpty ? rates : onPath).filter { $0 > 0 }
        let thiefRate = measured.isEmpty ? 0 : measured.reduce(0, +) / Double(measured.count)
        // A holder not measured yet (opened in this batch) is taken as an average one.
        let holderRates = Dictionary(uniqueKeysWithValues: running.map { connection in
            let measured = rate(of: connection, at: now)
            return (connection.id, measured > 0 ? measured : thiefRate)
        })
        let isTail = unassigned.ranges.allSatisfy { $0.lowerBound >= (total ?? Int64.max) }
        // The thief's fair share of the work left, so that everyone ends together (a share of
        // a shrinking rest: the last pieces are small and nobody waits on a long one), and at
        // most a chunk (see `Configuration.chunkDuration`).
        let work = running.reduce(Int64(0)) { $0 + $1.remaining }
        let aggregate = holderRates.values.reduce(0, +) + thiefRate
        let fair = thiefRate > 0 && aggregate > 0 ? Int64(Double(work) * thiefRate / aggregate) : Int64.max
        let piece = max(configuration.minimumSegment, min(chunkSize(at: thiefRate), fair))
        var best: (id: Int, split: Int64, finish: Double)?
        let align = configuration.alignment
        for connection in running.sorted(by: { $0.id < $1.id }) {
            let remaining = connection.remaining
            guard remaining > 0 else { continue }
            let holderRate = holderRates[connection.id] ?? 0
            let share = holderRate > 0 && thiefRate > 0 ? holderRate / (holderRate + thiefRate) : 0.5
            var split = (connection.position + Int64(Double(remaining) * share) + align - 1) / align * align
            // The piece comes from the end of the range: the holder's request runs on to its new
            // end and is cut once; the thief's ends with its range and its connection is kept.
            if connection.end - split > piece { split = (connection.end - piece + align - 1) / align * align }
            // In the tail (nothing left unassigned) pieces down to one block are taken from a
            // holder that would otherwise still be busy for long (`tailSteal`, at least a window):
            // each such steal cuts the holder's response, which costs its connection.
            let busyFor = holderRate > 0 ? Double(remaining) / holderRate : .infinity
            let minimum = isTail && busyFor > max(window, configuration.tailSteal).timeInterval ? align : configuration.minimumSegment
            guard split > connection.position, split < connection.end, connection.end - split >= minimum else { continue }
            let finish = holderRate > 0 ? Double(remaining) / holderRate : Double(remaining)
            if best == nil || finish > best!.finish { best = (connection.id, split, finish) }
        }
        return best.map { ($0.id, $0.split) }
    }

    /// What a thief at `rate` takes at most outside the tail.
    private func chunkSize(at rate: Double) -> Int64 {
        // Within the maximum before the conversion (a Double past Int64's range would trap).
        let wanted = rate > 0 ? Int64(min(Double(configuration.maximumChunk), rate * configuration.chunkDuration.timeInterval))
                              : configuration.minimumChunk
        return max(configuration.minimumChunk, wanted)
    }

    // MARK: ending

    private mutating func reachedEnd(_ id: Int) -> [Action] {
        guard let connection = connections[id], !connection.isSeamCheck else { return [] }
        stored.insert(contentsOf: connection.start..<connection.end)
        connections[id]!.position = connection.end
        guard connection.end < connection.coveredEnd else { return [] }
        var actions: [Action] = []
        if let thief = connections.values.first(where: { $0.start == connection.end && $0.firstByteAt == nil && !$0.isSeamCheck }) {
            // The connection that took the bytes after this end has not delivered one yet (slow
            // to answer, or not answering): this one is already flowing, so it goes on and the
            // other is closed.
            connections.removeValue(forKey: thief.id)
            if var round, round.added.contains(thief.id) {
                round.added.removeAll { $0 == thief.id }
                self.round = round.added.isEmpty ? nil : round
            }
            actions.append(.close(connection: thief.id))
        }
        // Extend in place when the bytes after its end are free and its request covers them.
        guard let next = unassigned.ranges.first(where: { $0.lowerBound == connection.end }) else { return actions }
        let end = min(connection.coveredEnd, next.upperBound)
        connections[id]!.end = end
        seams.remove(connection.end)
        if end < (total ?? Int64.max) { seams.insert(end) }
        return actions + [.setEnd(connection: id, end: end)]
    }

    private mutating func ended(_ id: Int, _ ending: Ending, now: Instant) -> [Action] {
        guard let connection = connections.removeValue(forKey: id) else { return [] }
        if ending != .finished { changedAt = now }
        if let seam = connection.seam {
            // A seam check. One that failed leaves its seam and is tried again, twice; then (or
            // with nothing else running) the attempt ends with its result, and the download's
            // machine decides what next.
            if ending == .finished { seams.remove(seam) }
            if ending != .finished, ending != .closed {
                seamCheckFailures[seam, default: 0] += 1
                if seamCheckFailures[seam, default: 0] > 2 || connections.isEmpty {
                    return closeAll() + [.endAttempt(connection: id)]
                }
            }
            return finishIfDone(now: now)
        }
        if ending == .finished {
            if total == nil {
                // A response of unknown length that ended cleanly: its end is the entity's.
                stored.insert(contentsOf: connection.start..<connection.position)
                total = connection.position
            } else {
                stored.insert(contentsOf: connection.start..<connection.end)
            }
        }
        if connection.position > connection.start, connection.position < connection.end {
            // Whoever continues from here starts a new response: a seam (its overlap verifies it).
            seams.insert(connection.position)
        }
        if var round, round.added.contains(id) {
            round.added.removeAll { $0 == id }
            self.round = round.added.isEmpty ? nil : round
        }
        if let stop = adjustTargets(after: ending, of: connection, id: id, now: now) { return stop }
        if connectionCount == 0 {
            if let total, stored.isSuperset(of: RangeSet(0..<total)) || total == 0 { return finishIfDone(now: now) }
            if ending != .finished, ending != .closed, ending != .rangeRefused { return closeAll() + [.endAttempt(connection: id)] }
            // Nothing runs: at least one connection must (a target lowered to zero, a closed path).
            if let path = preferredPaths.first, targets.values.reduce(0, +) == 0 { targets[path] = 1 }
        }
        return fill(now: now)
    }

    /// How the connection's end moves the targets (a refused range, a busy server, a lost
    /// connection); the actions that end the attempt when it cannot go on, else nil.
    private mutating func adjustTargets(after ending: Ending, of connection: Connection, id: Int, now: Instant) -> [Action]? {
        switch ending {
        case .finished, .closed:
            break
        case .rangeRefused:
            capability = .refused
            targets = [:]
            if let path = preferredPaths.first { targets[path] = 1 }
        case .serverBusy:
            serverLimit = connectionCount
            lowerTargets(to: connectionCount, now: now)
        case .transport(let delivered):
            // A connection that never delivered is not replaced (the server wants fewer, or the
            // path does not carry it). One that was delivering is replaced only once another
            // connection delivers after it was lost (`replacementDelay` later): when the server or
            // the path failed, the others fail too, and the download's machine decides (a wait
            // for the server, a backoff) instead of a burst of new connections.
            if delivered {
                targets[connection.path] = max(0, (targets[connection.path] ?? 1) - 1)
                lost.append((connection.path, now))
            } else {
                lowerTargets(to: connectionCount, now: now)
            }
        case .fatal:
            return closeAll() + [.endAttempt(connection: id)]
        }
        return nil
    }

    /// Holds the connections running now (at least one) and marks every path full.
    private mutating func lowerTargets(to count: Int, now: Instant) {
        var left = max(1, count)
        for path in preferredPaths {
            let keep = min(self.count(on: path), left)
            targets[path] = keep
            left -= keep
            fullPaths[path] = now
        }
        if targets.values.reduce(0, +) == 0, let path = preferredPaths.first { targets[path] = 1 }
    }

    private mutating func closeAll() -> [Action] {
        let ids = connections.keys.sorted()
        connections = [:]
        round = nil
        return ids.map { .close(connection: $0) }
    }

    /// Completes once every byte is stored and no seam is left; checks left-over seams first,
    /// as many at once as the maximum allows.
    private mutating func finishIfDone(now: Instant) -> [Action] {
        guard !isComplete, let total, stored.isSuperset(of: RangeSet(0..<total)) || total == 0, connectionCount == 0 else { return [] }
        let pending = seams.filter { $0 > 0 && $0 < total }.sorted()
        if pending.isEmpty {
            guard connections.isEmpty else { return [] }
            isComplete = true
            return [.complete]
        }
        let checking = Set(connections.values.compactMap(\.seam))
        guard let path = preferredPaths.first else { return [] }
        var actions: [Action] = []
        for seam in pending where !checking.contains(seam) && connections.count < maximumConnections {
            let range = max(0, seam - configuration.seamOverlap)..<min(total, seam + configuration.seamOverlap)
            actions.append(.verifySeam(open(path: path, range: range, now: now, seam: seam), at: seam))
        }
        return actions
    }

    /// Closes the newest connections over the maximum (their ranges go to whoever reaches them).
    private mutating func shed(now: Instant) -> [Action] {
        var actions: [Action] = []
        let running = connections.values.filter { !$0.isSeamCheck }.sorted { $0.id > $1.id }
        for connection in running.prefix(max(0, running.count - maximumConnections)) {
            connections.removeValue(forKey: connection.id)
            if connection.position > connection.start, connection.position < connection.end { seams.insert(connection.position) }
            targets[connection.path] = max(0, (targets[connection.path] ?? 1) - 1)
            actions.append(.close(connection: connection.id))
        }
        if !actions.isEmpty {
            changedAt = now
            if connectionCount == 0, let path = preferredPaths.first { targets[path] = 1 }
        }
        return actions
    }

    // MARK: stalls and paths

    private mutating func stallSuspected(_ id: Int, now: Instant) -> [Action] {
        // While other connections deliver, a silent one's range moves to a fresh connection at
        // once (on another path when there is one). When none delivers, the server or the path
        // is the problem, not this connection: the engine's race (and the download's wait for
        // the server) decides.
        guard let connection = connections[id], !connection.isSeamCheck, connectionCount > 1, isSegmenting,
              connections.values.contains(where: { other in
                  other.id != id && !other.isSeamCheck && other.meter.bytesPerSecond(over: .seconds(1), at: now) > 0
              }) else { return [] }
        connections.removeValue(forKey: id)
        if connection.position > connection.start, connection.position < connection.end { seams.insert(connection.position) }
        changedAt = now
        if let other = preferredPaths.first(where: { $0 != connection.path }) {
            targets[connection.path] = max(0, (targets[connection.path] ?? 1) - 1)
            targets[other, default: 0] += 1
            fullPaths[connection.path] = now
            stalledPaths.insert(connection.path)
        }
        return [.close(connection: id)] + fill(now: now)
    }

    private mutating func pathsChanged(_ newPaths: [Path], now: Instant) -> [Action] {
        let old = Set(preferredPaths)
        paths = newPaths
        let usable = preferredPaths
        var actions: [Action] = []
        var lost = 0
        // Connections on a path that is gone (or no longer to be used) are closed at once.
        for connection in connections.values.sorted(by: { $0.id < $1.id }) where !usable.contains(connection.path) {
            connections.removeValue(forKey: connection.id)
            if !connection.isSeamCheck {
                lost += 1
                if connection.position > connection.start, connection.position < connection.end { seams.insert(connection.position) }
            }
            actions.append(.close(connection: connection.id))
        }
        for path in Array(targets.keys) where !usable.contains(path) { targets[path] = nil }
        for path in Array(fullPaths.keys) where !usable.contains(path) { fullPaths[path] = nil }
        if let round, !usable.contains(round.path) { self.round = nil }
        changedAt = now
        guard let first = usable.first else { return actions }
        // A path that just appeared gets a connection at once (when segments allow a second);
        // what was lost moves to the remaining paths.
        for path in usable where !old.contains(path) && (isSegmenting || connectionCount == 0) {
            targets[path] = max(targets[path] ?? 0, 1)
            if lost > 0 { lost -= 1 }
        }
        if lost > 0 { targets[first, default: 0] += isSegmenting ? lost : (connectionCount == 0 ? 1 : 0) }
        if connectionCount == 0, targets.values.reduce(0, +) == 0 { targets[first] = 1 }
        return actions + fill(now: now)
    }

    // MARK: growth

    private mutating func tick(now: Instant) -> [Action] {
        guard isStarted, !isComplete else { return [] }
        countTicks(now: now)
        var actions: [Action] = []
        if let round { actions += judge(round, now: now) }
        for (path, since) in fullPaths where now - since >= (stalledPaths.contains(path) ? Self.stalledReprobe : configuration.reprobeInterval) {
            fullPaths[path] = nil
            stalledPaths.remove(path)
        }
        lost = lost.filter { entry in
            guard now - entry.at >= Self.replacementDelay else { return true }
            if connections.values.contains(where: { ($0.lastByteAt ?? entry.at) > entry.at && !$0.isSeamCheck }),
               preferredPaths.contains(entry.path) {
                targets[entry.path, default: 0] += 1
            }
            return false
        }
        actions += dropUselessExpensive(now: now)
        // An asked-for count sends its test connection once bytes flow, not after a judged span.
        if round == nil, isSegmenting, configuration.opensAllAtOnce && capability == .untested ? meter.total > 0 : settled(now: now) {
            actions += grow(now: now)
        }
        return actions + fill(now: now)
    }

    /// Counts, per delivering connection, the ticks that followed another within `awakeTick` (the
    /// engine ran and would have read what arrived) and those that found nothing new since it.
    /// A tick after a longer sleep (a loaded machine) proves nothing and is not counted.
    private mutating func countTicks(now: Instant) {
        defer { lastTickAt = now }
        guard let last = lastTickAt, now - last <= configuration.awakeTick else { return }
        for (id, connection) in connections where !connection.isSeamCheck {
            guard let first = connection.firstByteAt, first <= last else { continue }
            connections[id]!.ticks += 1
            if (connection.lastByteAt ?? first) <= last { connections[id]!.quietTicks += 1 }
        }
    }

    /// The writer paused the connections: the silences counted so far may be its own.
    private mutating func forgetTicks() {
        for id in connections.keys {
            connections[id]!.ticks = 0
            connections[id]!.quietTicks = 0
        }
    }

    /// Whether `connection` shows a per-connection cap's signs: silent over `quietShare` of the
    /// engine's ticks (a server pacing in bursts).
    private func showsCapSigns(_ connection: Connection) -> Bool {
        connection.ticks >= configuration.capSignTicks
            && Double(connection.quietTicks) >= configuration.quietShare * Double(connection.ticks)
    }

    /// Whether the connection count has held for a window and the aggregate rate was measured
    /// over one (a connection that replaced one that finished its range does not count as a change).
    private func settled(now: Instant) -> Bool {
        guard meter.total > 0, let first = connections.values.compactMap(\.firstByteAt).min(),
              now - first >= window, now - first >= bursts(on: preferredPaths.first ?? .routingTable) else { return false }
        return changedAt.map { now - $0 >= window } ?? true
    }

    /// The next path to grow on: an unused cheap path, then a cheap one to double, then the same
    /// for expensive paths; none that is full.
    private func nextGrowthPath() -> Path? {
        let candidates = preferredPaths.filter { fullPaths[$0] == nil }
        let cheap = candidates.filter { !$0.isExpensive }, expensive = candidates.filter(\.isExpensive)
        return cheap.first { count(on: $0) == 0 } ?? cheap.first
            ?? expensive.first { count(on: $0) == 0 } ?? expensive.first
    }

    /// Starts a round on the next path that may still gain.
    private mutating func grow(now: Instant) -> [Action] {
        guard let total, connectionCount < maximumConnections else { return [] }
        if let startedAt, now - startedAt < configuration.growthDelay { return [] }
        let current = bytesPerSecond(at: now)
        guard current > 0 else { return [] }
        let isAsked = configuration.opensAllAtOnce
        if !isAsked, connectionCount == 1, cappedPaths.isEmpty, current >= configuration.lineRate { return [] }
        let seconds = Double(total - storedBytes) / current
        guard seconds * 1000 >= Double(configuration.minimumRemainingTime.milliseconds) else { return [] }
        if let lastBackpressure, now - lastBackpressure < window * 2 { return [] }
        if let lastWriterPause, now - lastWriterPause <= window { return [] }
        // Until a range answer has come back, one extra connection tests the server.
        guard capability == .shown || connectionCount == 1, let path = nextGrowthPath() else { return [] }
        // A fast first connection without a cap's signs gets no test beside it on its path: the
        // test would gain nothing and its cut costs the bytes both had in flight.
        if !isAsked, connectionCount == 1, cappedPaths.isEmpty, current >= configuration.slowRate,
           let only = connections.values.first(where: { !$0.isSeamCheck }), only.path == path, !showsCapSigns(only) {
            return []
        }
        let onPath = count(on: path)
        // A capped server rewards every connection allowed: all of them at once; otherwise double.
        let wanted = cappedPaths.contains(path) ? maximumConnections - connectionCount : max(1, onPath)
        var add = min(wanted, maximumConnections - connectionCount, capability == .shown ? Int.max : 1)
        if let serverLimit, connectionCount + add > serverLimit { add = 1 }
        // The rates before are taken over as long as there is (up to a second): a short span of a
        // server pacing in bursts reads anything from nothing to twice its rate.
        let first = connections.values.compactMap(\.firstByteAt).min() ?? now
        let span = min(now - first, max(window, judgement(on: path)))
        var rate = meter.bytesPerSecond(over: span, at: now)
        var pathRate = pathMeters[path]?.bytesPerSecond(over: span, at: now) ?? 0
        if let lastJudged, lastJudged.path == path, now - lastJudged.at <= max(window, Self.replacementDelay) {
            (rate, pathRate) = (lastJudged.aggregate, lastJudged.onPath)
        }
        targets[path] = onPath + add
        let before = Set(connections.keys)
        let actions = fill(now: now)
        let added = connections.keys.filter { !before.contains($0) }.sorted()
        guard !added.isEmpty else {
            // Nothing left to split: this path cannot take more.
            targets[path] = onPath
            fullPaths[path] = now
            return actions
        }
        round = Round(path: path, isNewPath: onPath == 0, before: rate, pathBefore: pathRate, pathCountBefore: onPath,
                      added: added, startedAt: now)
        changedAt = now
        return actions
    }

    /// How long a round on `path` is measured once its connections deliver: long enough to hold
    /// several of the longest silences its connections showed (bursts, writer pauses).
    private func judgement(on path: Path) -> Duration {
        let gap = connections.values.filter { $0.path == path && !$0.isSeamCheck }.map(\.longestGap).max() ?? .zero
        return min(configuration.maximumJudgement,
                   max(window, configuration.minimumJudgement, gap * configuration.burstsPerJudgement))
    }

    /// Four of the longest silences on `path` (within `maximumJudgement`): how long a rate must be
    /// measured before a round to hold several bursts; a server sending evenly needs only a window.
    private func bursts(on path: Path) -> Duration {
        let gap = connections.values.filter { $0.path == path && !$0.isSeamCheck }.map(\.longestGap).max() ?? .zero
        return min(configuration.maximumJudgement, gap * configuration.burstsPerJudgement)
    }

    /// The mean rate of `connections` over `span`.
    private func meanRate(_ connections: [Connection], over span: Duration, at now: Instant) -> Double {
        guard !connections.isEmpty else { return 0 }
        return connections.reduce(0) { $0 + $1.meter.bytesPerSecond(over: span, at: now) } / Double(connections.count)
    }

    /// Keeps a measured round, or closes what it added.
    private mutating func judge(_ round: Round, now: Instant) -> [Action] {
        let from: Instant
        if let measured = round.measuredFrom {
            from = measured
            guard now - from >= judgement(on: round.path) else { return [] }
        } else if now - round.startedAt >= configuration.firstByteTimeout {
            from = now - window
        } else {
            return []
        }
        self.round = nil
        let span = max(window, now - from)
        let after = meter.bytesPerSecond(over: span, at: now)
        let added = round.added.compactMap { connections[$0] }
        let older = connections.values.filter { $0.path == round.path && !$0.isSeamCheck && !round.added.contains($0.id) }
        let gain = after - round.before
        let needed = round.isNewPath
            ? configuration.newPathGain * round.before
            : configuration.usefulGain * round.pathBefore / Double(max(1, round.pathCountBefore)) * Double(added.count)
        // A per-connection cap: the added connections carried about what the older ones did over
        // the same span, and the older ones did not lose their rate to them (on a shared
        // bottleneck each would have dropped to a share).
        let perAdded = meanRate(added, over: span, at: now), perOlder = meanRate(older, over: span, at: now)
        let perBefore = round.pathBefore / Double(max(1, round.pathCountBefore))
        let capped = !round.isNewPath && !added.isEmpty && !older.isEmpty && perOlder > 0
            && perAdded >= configuration.capShare * perOlder && perOlder >= configuration.capShare * perBefore
        if !added.isEmpty, capped || (gain > 0 && gain >= needed) {
            // Measured for a window already: the next round may start at once.
            if capped { cappedPaths.insert(round.path) }
            lastJudged = (now, round.path, after, pathMeters[round.path]?.bytesPerSecond(over: span, at: now) ?? 0)
            changedAt = now - window
            return []
        }
        // One span that reads as no gain does not park a capped path (a writer pause, a burst
        // missed). Not so before a cap was seen: a server without one (the common case when the
        // disk is what pauses the writer) keeps one connection, and a test connection kept longer
        // costs the bytes in flight when it is cut.
        if !added.isEmpty, round.measuredFrom != nil, cappedPaths.contains(round.path),
           round.remeasured < configuration.remeasures {
            var again = round
            again.remeasured += 1
            again.measuredFrom = now
            self.round = again
            return []
        }
        return closeRound(round, added: added, now: now)
    }

    /// Not worth it: the path is full; what the round added is closed (its ranges go to whoever
    /// reaches them first).
    private mutating func closeRound(_ round: Round, added: [Connection], now: Instant) -> [Action] {
        fullPaths[round.path] = now
        cappedPaths.remove(round.path)
        // A path whose new connection never delivered is not full but failing: tried again soon.
        if round.measuredFrom == nil { stalledPaths.insert(round.path) }
        targets[round.path] = max(0, count(on: round.path) - added.count)
        var actions: [Action] = []
        for connection in added {
            connections.removeValue(forKey: connection.id)
            if connection.position > connection.start, connection.position < connection.end { seams.insert(connection.position) }
            actions.append(.close(connection: connection.id))
        }
        if connectionCount == 0, let path = preferredPaths.first { targets[path] = max(1, targets[path] ?? 0) }
        // The count is back to what was measured before the round: the next path may be tried at once.
        changedAt = now - window
        return actions
    }

    /// An expensive path stays only while it carries at least `newPathGain` of the aggregate.
    private mutating func dropUselessExpensive(now: Instant) -> [Action] {
        guard round == nil, settled(now: now) else { return [] }
        let total = bytesPerSecond(at: now)
        guard total > 0 else { return [] }
        var actions: [Action] = []
        for path in preferredPaths where path.isExpensive && count(on: path) > 0 {
            let share = (pathMeters[path]?.bytesPerSecond(over: window, at: now) ?? 0) / total
            guard share < configuration.newPathGain, preferredPaths.contains(where: { !$0.isExpensive }) else { continue }
            for connection in connections.values.sorted(by: { $0.id < $1.id }) where connection.path == path {
                connections.removeValue(forKey: connection.id)
                if connection.position > connection.start, connection.position < connection.end { seams.insert(connection.position) }
                actions.append(.close(connection: connection.id))
            }
            targets[path] = 0
            fullPaths[path] = now
            if let cheap = preferredPaths.first(where: { !$0.isExpensive }) { targets[cheap] = max(1, targets[cheap] ?? 0) }
        }
        if !actions.isEmpty { changedAt = now }
        return actions
    }
}
