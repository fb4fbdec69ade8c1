import FoundationEssentials
import ReachabilityBase

// The planner's vocabulary: paths, its configuration, what it is told and what it asks for
// (SegmentPlanner.swift is the state machine).
extension SegmentPlanner {
    /// A way out of the host for a connection.
    struct Path: Sendable, Hashable, CustomStringConvertible {
        /// The interface connections are bound to (`SO_BINDTODEVICE` with its address); nil
        /// follows the routing table.
        var interface: String?
        /// A cellular-like or metered path.
        var isExpensive: Bool
        /// The source its connections fetch from (`SourceLedger`): 0 is the download's URL,
        /// others its mirrors, proven the same file (issue 34). A mirror is another path to
        /// the planner, measured and grown as one.
        var source = 0

        init(interface: String?, isExpensive: Bool = false, source: Int = 0) {
            self.interface = interface
            self.isExpensive = isExpensive
            self.source = source
        }

        /// The routing table's choice (no binding).
        static let routingTable = Path(interface: nil)

        var description: String { (interface ?? "default") + (source == 0 ? "" : " mirror \(source)") }
    }

    /// When expensive paths may carry connections (cheap ones always may).
    enum ExpensiveUse: Sendable, Hashable {
        /// Tried after the cheap paths stop gaining; kept while they add throughput.
        case whenUseful
        /// Only while no cheap path is usable.
        case fallbackOnly
    }

    struct Configuration: Sendable, Hashable {
        /// Most connections this download may hold at once (its share of the per-host cap).
        var maximumConnections: Int
        /// Split points are multiples of this (the block journal's block), so a block has one writer.
        var alignment: Int64 = 256 << 10
        /// No split leaves a connection less than this (except in the tail, see `SegmentPlanner`).
        var minimumSegment: Int64 = 1 << 20
        /// A thief takes at most this long's worth of bytes at its expected rate (within
        /// `minimumChunk`...`maximumChunk`), from the end of the holder's range: the holder's
        /// request runs on to its new end and is cut once, late; the thief's request ends with
        /// its range, so its connection is kept for the next range instead of being closed.
        var chunkDuration: Duration = .seconds(4)
        var minimumChunk: Int64 = 8 << 20
        /// A first connection at least this fast (bytes/s: 1 Gbit/s's payload) gets no test
        /// connection while no path showed a cap: a server capping each connection caps it
        /// below that, and one that does not gives nothing for a second; cutting the test
        /// connection again sent 14 % of a file twice (issue 30, unthrottled nginx on a veth).
        var lineRate: Double = 120e6
        /// A first connection at least this fast (bytes/s) gets no test connection on its own path
        /// while no path showed a cap, unless it shows a cap's signs (`quietShare`): on a loaded
        /// machine an unthrottled veth read 73-120 MB/s, and each test there cut the first
        /// connection, up to 16 % of a file sent twice (issue 30). Slower ones are tested: a
        /// server pacing evenly shows no bursts.
        var slowRate: Double = 25e6
        /// A cap's sign: the connection was silent over at least this share of the engine's
        /// ticks (at least `capSignTicks` of them, each within `awakeTick` of the one before, so
        /// that the engine was running and would have read what arrived): nginx's `limit_rate`
        /// sends a chunk and sleeps (2 MiB then 500 ms at `4m`), while a connection limited by
        /// the path or the client always has bytes waiting.
        var quietShare = 0.5
        var capSignTicks = 4
        var awakeTick: Duration = .milliseconds(100)
        var maximumChunk: Int64 = 256 << 20
        /// In the tail, pieces under `minimumSegment` are taken only from a holder still busy for
        /// longer than this (and than a window).
        var tailSteal: Duration = .milliseconds(500)
        /// Bytes compared across a seam on each side: the resume rule's floor
        /// (`ResumeOverlap.minimum`), enough to tell two versions apart. Every range restarted
        /// after a kill or an outage compares them on both sides; 16 KiB each side was 160 of
        /// the 224 KiB a kill with six ranges fetched again for nothing (issue 30).
        var seamOverlap: Int64 = 4 << 10
        /// Bytes the group's first connection compares before its start when they are on disk
        /// (the resume proof; a plain resume without a group compares up to 64 KiB): a group
        /// exists only for a strong validator or a SHA-256, which prove the entity too.
        var firstOverlap: Int64 = 16 << 10
        /// A connection on a path seen capping each connection gets a receive buffer (SO_RCVBUF)
        /// of the cap's rate over this span (or four round trips, when longer), within
        /// `smallestReceiveBuffer`...`largestReceiveBuffer`: what the server has in flight is at
        /// most that window, and it is what a kill, a reset or a cut throws away (issue 30: with
        /// autotuned buffers a 2-4 s server reset cost up to 2.5 MiB on the wire for six
        /// connections). nginx's `limit_rate` waits a send's worth of its rate after every send,
        /// so the window must drain within that wait: 25 ms cost `--connections 16` 3.7 % at load
        /// 8 (4.73 against 4.56 s), 40 ms holds a kill's loss to about 100 KiB a connection.
        var receiveSpan: Duration = .milliseconds(40)
        var smallestReceiveBuffer = 64 << 10
        var largestReceiveBuffer = 1 << 20
        /// How long new connections deliver before their round is judged, until the round trip
        /// is known (then eight round trips within `minimumWindow`...`maximumWindow`).
        var evaluationWindow: Duration = .milliseconds(300)
        var minimumWindow: Duration = .milliseconds(150)
        var maximumWindow: Duration = .seconds(1)
        /// A round is judged over at least this long once its connections deliver, and over at
        /// least `burstsPerJudgement` times the longest silence a connection on its path showed
        /// (a server pacing in bursts, a writer pause), at most `maximumJudgement`: nginx's
        /// `limit_rate` with an 85 ms writer pause read as "no gain" over 150 ms (issue 30).
        var minimumJudgement: Duration = .milliseconds(300)
        var maximumJudgement: Duration = .seconds(2)
        var burstsPerJudgement = 4
        /// A per-connection cap: each added connection carried at least this share of what an
        /// older one carried over the same span, and the older ones kept this share of their rate.
        var capShare = 0.6
        /// How many times a round that reads as no gain on a path already seen capped is
        /// measured again before its connections are closed.
        var remeasures = 2
        /// A round on a path in use is kept when each added connection raised the aggregate by at
        /// least this share of the path's average connection before the round.
        var usefulGain: Double = 0.5
        /// A round that adds a path is kept when the aggregate grew by at least this share; an
        /// expensive path whose share of the aggregate falls under it is dropped.
        var newPathGain: Double = 0.1
        /// No connection is added when the rest would take less than this at the current rate.
        var minimumRemainingTime: Duration = .seconds(1)
        /// How long an added connection may take to deliver its first byte before its round is
        /// judged without it.
        var firstByteTimeout: Duration = .seconds(2)
        /// A full path (or a dropped expensive one) is tried again after this.
        var reprobeInterval: Duration = .seconds(10)
        /// No connection is added before the attempt has run this long (after a failed attempt:
        /// a server that just dropped a connection has not shown it serves more).
        var growthDelay: Duration = .zero
        var expensiveUse: ExpensiveUse = .whenUseful
        /// The caller asked for `maximumConnections` itself (`--connections N`): the test
        /// connection goes out as soon as the first bytes flow, and once its 206 is back every
        /// connection allowed opens at once and stays, as `aria2c -x N` does. Without it the
        /// count ramps in judged rounds (a polite default that keeps one connection where a
        /// second gains nothing).
        var opensAllAtOnce = false

        init(maximumConnections: Int) {
            self.maximumConnections = max(1, maximumConnections)
        }
    }

    /// Whether this attempt may fetch ranges over several connections.
    enum Capability: Sendable, Hashable {
        /// No range answer seen yet.
        case untested
        /// A 206 with the right Content-Range and the download's validator came back.
        case shown
        /// Not in this attempt (a range was refused).
        case refused
    }

    /// A request to open.
    struct Request: Sendable, Hashable {
        var connection: Int
        var path: Path
        /// The bytes this connection stores (the executor adds the overlaps before and after).
        var range: Range<Int64>
    }

    /// How a connection ended.
    enum Ending: Sendable, Hashable {
        /// Its range is stored and its request is over.
        case finished
        /// The transport failed; `delivered` tells whether it had stored any byte.
        case transport(delivered: Bool)
        /// The server said it is busy (5xx, 408, 429): it wants fewer connections.
        case serverBusy
        /// The server answered the range with something other than the range (a 200, another
        /// range, a missing or different validator, another length): no more segments.
        case rangeRefused
        /// Closed on the planner's request.
        case closed
        /// The attempt cannot go on (HTTP 4xx, write failure, ...): it ends with this
        /// connection's result.
        case fatal
    }

    enum Input: Sendable, Hashable {
        /// The attempt starts: what is stored, the unverified seams kept with it, the length when
        /// known, whether segments are allowed when that is already known (a resume), the usable
        /// paths best first.
        case start(stored: RangeSet<Int64>, seams: Set<Int64>, total: Int64?, allowsSegments: Bool?, paths: [Path])
        /// A connection's response was accepted. `isRange`: a 206 for the range asked;
        /// `allowsSegments`: whether the response allows splitting (strong validator or an
        /// expected checksum, a length, ranges not refused); the first answer decides.
        case accepted(connection: Int, total: Int64?, isRange: Bool, allowsSegments: Bool)
        /// A connection stored everything up to its end (the executor asks before going past it).
        case reachedEnd(connection: Int)
        case ended(connection: Int, Ending)
        /// The bytes on both sides of `at` were compared and agree.
        case seamVerified(at: Int64)
        /// The bytes across a seam (or a resume overlap) differ: the pieces are not one version.
        case seamMismatch(at: Int64)
        /// A connection received nothing for longer than its pace explains.
        case stallSuspected(connection: Int)
        /// The usable paths, best first (already filtered by policy).
        case pathsChanged([Path])
        /// The disk fell behind (the writer paused a transfer): more connections would not help.
        case backpressure
        /// The writer holds the transfers paused now (the disk behind): their silence at this
        /// tick is the client's, not the server's (no cap's sign).
        case writerPaused
        /// The only connection's answer was the whole entity (a 200 to a resume): everything
        /// stored is being replaced by its body, from zero.
        case restartedInPlace(connection: Int, total: Int64?, allowsSegments: Bool)
        /// How many connections this download may hold now: its share of the per-host bound,
        /// which other downloads to the same server take from. Connections over it are closed.
        case allowance(Int)
        /// A connection to the server took this long to set up (about a round trip).
        case roundTrip(Duration)
        case tick
    }

    enum Action: Sendable, Hashable {
        case open(Request)
        /// Move a running connection's end: shrink it for a thief, or extend it in place.
        case setEnd(connection: Int, end: Int64)
        /// Abort a connection; its remaining range is free again.
        case close(connection: Int)
        /// Fetch `request.range` (the seam `at` with `seamOverlap` on each side) and compare it
        /// with the disk, storing nothing.
        case verifySeam(Request, at: Int64)
        /// The unverified seams grew; keep them with the resume data before the next byte.
        case seamsChanged(Set<Int64>)
        /// Every byte is stored and every seam verified.
        case complete
        /// Nothing can continue: end the attempt with this connection's result.
        case endAttempt(connection: Int)
        /// The stored pieces are not one version: start over.
        case restart(reason: String)
    }

    /// One open request.
    struct Connection: Sendable, Hashable {
        var id: Int
        var path: Path
        /// Its first byte.
        var start: Int64
        /// The next byte it stores.
        var position: Int64
        /// One past its last byte.
        var end: Int64
        /// One past the last byte its request covers: it can extend up to here without a new request.
        var coveredEnd: Int64
        var openedAt: Instant
        var firstByteAt: Instant?
        var lastByteAt: Instant?
        var meter = ThroughputWindow()
        /// A seam check: compares, stores nothing. `seam` is the boundary it checks.
        var seam: Int64?
        /// The longest silence between two deliveries (bursts, writer pauses).
        var longestGap: Duration = .zero
        /// The engine's ticks since its first byte (or the last writer pause) that followed
        /// another within `awakeTick`, and those of them with no byte since the one before.
        var ticks = 0
        var quietTicks = 0

        var remaining: Int64 { max(0, end - position) }
        var isSeamCheck: Bool { seam != nil }
    }
}
