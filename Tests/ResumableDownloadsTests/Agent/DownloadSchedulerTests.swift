import Foundation
import Testing
@testable import ResumableDownloads

/// The slots and the line (issue 29 made adds and admissions cost no scan of the whole queue):
/// the order must stay higher priority first, then first come.
@Suite("Download scheduler")
struct DownloadSchedulerTests {
    @Test func linesUpByPriorityThenArrivalAndFillsOnlyFreeSlots() {
        var scheduler = DownloadScheduler(limit: 2)
        let ids = (0..<7).map { _ in UUID() }
        scheduler.enqueue(ids[0])
        scheduler.enqueue(ids[1], priority: 0.2)
        scheduler.enqueue(ids[2])
        scheduler.enqueue(ids[3], priority: 0.9)
        scheduler.enqueue(ids[4], priority: 0.5)
        scheduler.enqueue(ids[5], priority: 0.2)
        scheduler.enqueue(ids[6], priority: 0.9)
        scheduler.enqueue(ids[2])   // once only
        #expect(scheduler.queue == [ids[3], ids[6], ids[0], ids[2], ids[4], ids[1], ids[5]])
        #expect(scheduler.isQueued(ids[1]))

        // Not runnable ones keep their place; the slots fill in order.
        let admitted = scheduler.admit { $0 != ids[3] }
        #expect(admitted == [ids[6], ids[0]])
        #expect(scheduler.queue == [ids[3], ids[2], ids[4], ids[1], ids[5]])
        #expect(!scheduler.isQueued(ids[0]))
        #expect(scheduler.admit { _ in true }.isEmpty, "no free slot")
        scheduler.enqueue(ids[0])
        #expect(!scheduler.queue.contains(ids[0]), "not while it holds a slot")

        scheduler.dequeue(ids[4])
        #expect(!scheduler.isQueued(ids[4]))
        scheduler.release(ids[6])
        #expect(scheduler.admit { _ in true } == [ids[3]])
        // A default-priority download goes behind the others of its priority, ahead of lower ones.
        scheduler.enqueue(ids[4])
        #expect(scheduler.queue == [ids[2], ids[4], ids[1], ids[5]])
    }

    /// BITS' classes: higher first, first come first served within one, whatever the order of
    /// arrival.
    @Test func classesLineUpInOrder() {
        var scheduler = DownloadScheduler(limit: 1)
        let blocker = UUID()
        scheduler.enqueue(blocker)
        #expect(scheduler.admit { _ in true } == [blocker])
        let arrivals: [(UUID, DownloadPriority)] = [.low, .normal, .high, .low, .foreground, .normal, .high, .foreground]
            .map { (UUID(), $0) }
        for (id, priority) in arrivals { scheduler.enqueue(id, priority: priority.value) }
        let expected = DownloadPriority.allCases.flatMap { priority in arrivals.filter { $0.1 == priority }.map(\.0) }
        #expect(scheduler.queue == expected)
        #expect(DownloadPriority.allCases.map { DownloadPriority(value: $0.value) } == DownloadPriority.allCases)
    }

    /// Within one class, first come first served whatever the number: 0.8, 0.76 and 0.9 are all
    /// `high` and keep their order of arrival (the line used to order by the raw number), and a
    /// foreground download takes the slot of the latest admitted `low` one, not of the one with
    /// the smaller number.
    @Test func withinOneClassFirstComeFirstServed() {
        var scheduler = DownloadScheduler(limit: 2)
        let blockers = [UUID(), UUID()]
        for id in blockers { scheduler.enqueue(id) }
        #expect(scheduler.admit { _ in true } == blockers)
        let high = [(UUID(), Float(0.8)), (UUID(), 0.76), (UUID(), 0.9)]
        let low = [(UUID(), Float(0.25)), (UUID(), 0.1)]
        let normal = [(UUID(), Float(0.3)), (UUID(), 0.7), (UUID(), 0.5)]
        for (id, value) in [low[0], normal[0], high[0], normal[1], high[1], low[1], normal[2], high[2]] {
            scheduler.enqueue(id, priority: value)
        }
        #expect(scheduler.queue == (high + normal + low).map(\.0))

        var slots = DownloadScheduler(limit: 2)
        let first = UUID(), latest = UUID()
        slots.enqueue(first, priority: 0.1)
        #expect(slots.admit { _ in true } == [first])
        slots.enqueue(latest, priority: 0.2)
        #expect(slots.admit { _ in true } == [latest])
        slots.enqueue(UUID(), priority: DownloadPriority.foreground.value)
        #expect(slots.preempt() == [latest], "the latest admitted of the lowest class yields")
    }

    /// `URLSessionTask.priority` (and `DownloadOptions.priority`) onto the agent's classes.
    @Test(arguments: [(Float(1), DownloadPriority.foreground), (0.99, .high), (0.75, .high), (0.74, .normal), (0.6, .normal),
                      (0.5, .normal), (0.4, .normal), (0.26, .normal), (0.25, .low), (0.1, .low), (0, .low),
                      (2, .foreground), (-1, .low), (.nan, .normal)])
    func aTaskPriorityFallsInItsClass(value: Float, expected: DownloadPriority) {
        #expect(DownloadPriority(value: value) == expected)
    }

    /// A foreground download finding every slot taken makes one lower download yield (the lowest
    /// class, latest admitted); that one goes back at the front of its class, and the slot goes
    /// to the foreground download. Foreground downloads never preempt each other, and a second
    /// call before the slot is released asks nobody else.
    @Test func foregroundPreemptsTheLatestLowestAndItComesBackFirst() {
        var scheduler = DownloadScheduler(limit: 3)
        let high = UUID(), lowFirst = UUID(), lowLatest = UUID(), lowWaiting = UUID()
        scheduler.enqueue(high, priority: DownloadPriority.high.value)
        scheduler.enqueue(lowFirst, priority: DownloadPriority.low.value)
        scheduler.enqueue(lowLatest, priority: DownloadPriority.low.value)
        #expect(scheduler.admit { _ in true } == [high, lowFirst, lowLatest])
        scheduler.enqueue(lowWaiting, priority: DownloadPriority.low.value)
        #expect(scheduler.preempt().isEmpty, "no foreground download waits")

        let foreground = UUID()
        scheduler.enqueue(foreground, priority: DownloadPriority.foreground.value)
        #expect(scheduler.admit { _ in true }.isEmpty, "every slot is taken")
        #expect(scheduler.preempt() == [lowLatest])
        #expect(scheduler.preempt().isEmpty, "already yielding")
        #expect(scheduler.yielding == [lowLatest])

        // The victim's driver checkpoints and ends; it is queued again ahead of lowWaiting.
        scheduler.release(lowLatest)
        scheduler.enqueue(lowLatest, priority: DownloadPriority.low.value)
        #expect(scheduler.queue == [foreground, lowLatest, lowWaiting])
        #expect(scheduler.admit { _ in true } == [foreground])
        #expect(scheduler.yielding.isEmpty)

        // Two more foreground ones: the other low and then the high give way, never a foreground.
        let second = UUID(), third = UUID(), fourth = UUID()
        for id in [second, third, fourth] { scheduler.enqueue(id, priority: DownloadPriority.foreground.value) }
        #expect(scheduler.preempt() == [lowFirst, high])
        scheduler.release(lowFirst)
        scheduler.release(high)
        #expect(scheduler.admit { _ in true } == [second, third])
        #expect(scheduler.preempt().isEmpty, "only foreground downloads hold slots")
        #expect(scheduler.queue.first == fourth)
        // A free slot covers a waiting foreground download without a preemption.
        scheduler.release(foreground)
        #expect(scheduler.preempt().isEmpty)
        #expect(scheduler.admit { _ in true } == [fourth])
    }

    /// 10,000 adds at the default priority, then admissions: cheap enough that the whole run is
    /// far below a second even unoptimised (it was a scan per add and per admission).
    @Test func tenThousandQueuedDownloads() {
        var scheduler = DownloadScheduler(limit: 4)
        let ids = (0..<10_000).map { _ in UUID() }
        for id in ids { scheduler.enqueue(id) }
        #expect(scheduler.queue == ids)
        var admitted: [UUID] = []
        while admitted.count < ids.count {
            let batch = scheduler.admit { _ in true }
            admitted += batch
            for id in batch { scheduler.release(id) }
        }
        #expect(admitted == ids)
        #expect(scheduler.queue.isEmpty)
    }
}
