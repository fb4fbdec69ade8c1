/// "Did you mean" for a mistyped subcommand or option, as git and swift-argument-parser do.
enum Suggestion {
    /// The candidate closest to `word` by edit distance, when it is close enough to be a typo:
    /// at most 2 edits, and fewer than half the word's length (so `ls` does not suggest `id`).
    static func closest(to word: String, among candidates: [String]) -> String? {
        let scored = candidates.map { ($0, editDistance(word.lowercased(), $0.lowercased())) }
        guard let best = scored.min(by: { $0.1 < $1.1 }) else { return nil }
        let limit = min(2, max(1, word.count / 2))
        // A prefix of a longer name (`--sha` for `--sha256`) is a clear enough intent too.
        if best.1 > limit {
            let prefixed = candidates.filter { $0.hasPrefix(word) && word.count >= 3 }
            return prefixed.count == 1 ? prefixed[0] : nil
        }
        return best.0
    }

    /// ` Did you mean 'x'?` or nothing, to append to an error message.
    static func clause(for word: String, among candidates: [String]) -> String {
        closest(to: word, among: candidates).map { ". Did you mean '\($0)'?" } ?? ""
    }

    /// Damerau-Levenshtein (optimal string alignment): a swapped pair of letters is one edit.
    static func editDistance(_ a: String, _ b: String) -> Int {
        let a = Array(a), b = Array(b)
        if a.isEmpty { return b.count }
        if b.isEmpty { return a.count }
        var previousPrevious = [Int](repeating: 0, count: b.count + 1)
        var previous = Array(0...b.count)
        var current = [Int](repeating: 0, count: b.count + 1)
        for i in 1...a.count {
            current[0] = i
            for j in 1...b.count {
                let cost = a[i - 1] == b[j - 1] ? 0 : 1
                current[j] = min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + cost)
                if i > 1, j > 1, a[i - 1] == b[j - 2], a[i - 2] == b[j - 1] {
                    current[j] = min(current[j], previousPrevious[j - 2] + 1)
                }
            }
            (previousPrevious, previous, current) = (previous, current, previousPrevious)
        }
        return previous[b.count]
    }
}
