import FoundationEssentials
import LinuxSystem

extension CheckedDirectory {
    /// Every `*.json` record in this directory that decodes and passes `problem` (nil: valid;
    /// given the record and its file name); one that does not is moved aside to `NAME.bad`,
    /// reported through `warn` (naming `kind`), and never acted on. Records are input: the
    /// agent's background sessions and upload jobs read theirs through this one rule.
    func loadRecords<Record: Decodable>(_ kind: String, limit: Int, problem: (Record, String) -> String?,
                                        warn: (String) -> Void) -> [Record] {
        var records: [Record] = []
        for name in ((try? entries()) ?? []).sorted() where name.hasSuffix(".json") {
            do {
                let record = try JSONDecoder().decode(Record.self, from: Data(try readOwnedFile(name, limit: limit)))
                if let problem = problem(record, name) { throw RecordProblem(description: problem) }
                records.append(record)
            } catch {
                try? self.rename(name, to: name + ".bad", replacing: true)
                warn("moved the invalid \(kind) record \(child(name)) aside: \(error)")
            }
        }
        return records
    }
}

/// Why a record was refused.
private struct RecordProblem: Error, CustomStringConvertible { var description: String }
