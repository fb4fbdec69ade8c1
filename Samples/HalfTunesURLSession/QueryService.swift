// The iOS sample's QueryService: the search is a data task on a default session, its JSON read
// with JSONSerialization as the seed does. Changed: ResumableURLSession for URLSession (a search
// started offline fails at once with -1009 and one cut mid-answer with -1005, instead of -1001 a
// minute later), the search URL is a parameter (the iTunes endpoint by default, a local server
// in tests), and the completion is called on every outcome (the seed's stays silent on errors).

import Foundation
import FoundationNetworking
import ResumableURLSession

/// One search result: what a Track is made of.
struct SearchResult: Sendable {
    let name: String
    let artist: String
    let previewURL: URL
}

final class QueryService: Sendable {
    /// iOS: `URLSession(configuration: .default)`.
    let defaultSession: ResumableURLSession
    let searchURL: URL

    typealias QueryResult = @Sendable ([SearchResult], String) -> Void

    init(searchURL: URL, stateDirectory: URL) {
        self.searchURL = searchURL
        defaultSession = ResumableURLSession(configuration: ResumableURLSession.Configuration(stateDirectory: stateDirectory))
    }

    /// Searches for songs; `completion` gets the tracks and an error message (empty when none),
    /// on the session's delegate queue.
    func getSearchResults(searchTerm: String, completion: @escaping QueryResult) {
        guard var urlComponents = URLComponents(url: searchURL, resolvingAgainstBaseURL: false) else {
            return completion([], "the search URL cannot be used: \(searchURL)")
        }
        urlComponents.queryItems = (urlComponents.queryItems ?? [])
            + [URLQueryItem(name: "media", value: "music"), URLQueryItem(name: "entity", value: "song"),
               URLQueryItem(name: "term", value: searchTerm)]
        guard let url = urlComponents.url else { return completion([], "the search term cannot be sent: \(searchTerm)") }
        let dataTask = defaultSession.dataTask(with: url) { data, response, error in
            if let error {
                completion([], "DataTask error: " + error.localizedDescription)
            } else if let data, let response = response as? HTTPURLResponse, response.statusCode == 200 {
                let (tracks, message) = Self.searchResults(from: data)
                completion(tracks, message)
            } else {
                completion([], "the search answered HTTP \((response as? HTTPURLResponse)?.statusCode ?? 0)")
            }
        }
        dataTask.resume()
    }

    /// The seed's updateSearchResults: `results[].previewUrl/trackName/artistName`; entries
    /// without an http(s) preview are skipped.
    static func searchResults(from data: Data) -> ([SearchResult], String) {
        let response: [String: Any]
        do {
            guard let object = try JSONSerialization.jsonObject(with: data) as? [String: Any] else {
                return ([], "JSONSerialization error: the answer is not an object")
            }
            response = object
        } catch {
            return ([], "JSONSerialization error: \(error.localizedDescription)")
        }
        guard let array = response["results"] as? [Any] else {
            return ([], "Dictionary does not contain results key")
        }
        var tracks: [SearchResult] = []
        var message = ""
        for trackDictionary in array {
            if let trackDictionary = trackDictionary as? [String: Any],
               let previewURLString = trackDictionary["previewUrl"] as? String,
               let previewURL = URL(string: previewURLString), ["http", "https"].contains(previewURL.scheme?.lowercased() ?? ""),
               let name = trackDictionary["trackName"] as? String,
               let artist = trackDictionary["artistName"] as? String {
                tracks.append(SearchResult(name: name, artist: artist, previewURL: previewURL))
            } else {
                message += "Problem parsing trackDictionary\n"
            }
        }
        return (tracks, message)
    }
}
