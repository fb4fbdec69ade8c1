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
