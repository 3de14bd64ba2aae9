// SPDX-License-Identifier: Apache-2.0
#include "config/yaml_flow_opener.h"

#include <vector>

namespace rdmagw {

namespace {

std::vector<std::string_view> split_lines(std::string_view text) {
  std::vector<std::string_view> lines;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    lines.push_back(text.substr(start, end - start));
    if (end == text.size()) break;
    start = end + 1;
  }
  return lines;
}

size_t indent_of(std::string_view line) {
  size_t i = 0;
  while (i < line.size() && line[i] == ' ') ++i;
  return i;
}

// "key: ..." at the start of `line` after its indentation and any "- "
// list markers: the key, and whether the line is a list item.
std::string key_on(std::string_view line, bool* item) {
  size_t i = indent_of(line);
  *item = false;
  while (i + 1 < line.size() && line[i] == '-' && line[i + 1] == ' ') {
    *item = true;
    i += 2;
    while (i < line.size() && line[i] == ' ') ++i;
  }
  size_t colon = line.find(':', i);
  if (colon == std::string_view::npos) return {};
  std::string_view key = line.substr(i, colon - i);
  if (key.empty() || key.find_first_of("{}[]\"',#") != std::string_view::npos) return {};
  if (colon + 1 < line.size() && line[colon + 1] != ' ') return {};
  return std::string(key);
}

// "listeners[].routes" from the innermost segment out.
std::string joined(const std::vector<std::string>& inner_first) {
  std::string path;
  for (size_t i = inner_first.size(); i-- > 0;) {
    const std::string& s = inner_first[i];
    if (s != "[]" && !path.empty()) path += '.';
    path += s;
  }
  return path;
}

// The block path of the opener on line `index`: its own key (or "[]" for a
// list item), then the keys of the lines above whose content it is nested
// in. A list item's own key (`- name: x`) is a sibling of the lines under
// it, unless they are indented past that key.
std::string block_path(const std::vector<std::string_view>& lines, size_t index, const std::string& own_key,
                       bool own_item) {
  std::vector<std::string> segments;
  if (!own_key.empty()) segments.push_back(own_key);
  if (own_item) segments.push_back("[]");
  size_t indent = indent_of(lines[index]);
  for (size_t i = index; i-- > 0 && indent > 0;) {
    std::string_view line = lines[i];
    size_t first = indent_of(line);
    if (first >= line.size() || line[first] == '#' || first >= indent) continue;
    bool item = false;
    std::string key = key_on(line, &item);
    if (key.empty() && !item) continue;
    size_t key_column = item ? line.find_first_not_of("- ", first) : first;
    if (!key.empty() && (!item || indent > key_column)) segments.push_back(key);
    if (item) segments.push_back("[]");
    indent = first;
  }
  return joined(segments);
}

}  // namespace

std::optional<FlowOpener> unclosed_flow_opener(std::string_view text, int line, int column) {
  std::vector<std::string_view> lines = split_lines(text);
  struct Open {
    size_t line, column;
    char bracket;
  };
  std::vector<Open> open;
  for (size_t l = 0; l < lines.size() && static_cast<int>(l) < line; ++l) {
    std::string_view s = lines[l];
    char quote = 0;
    for (size_t c = 0; c < s.size(); ++c) {
      if (static_cast<int>(l) + 1 == line && static_cast<int>(c) + 1 >= column) break;
      char ch = s[c];
      if (quote) {
        if (ch == '\\' && quote == '"')
          ++c;
        else if (ch == quote)
          quote = 0;
        continue;
      }
      if (ch == '"' || ch == '\'') {
        quote = ch;
      } else if (ch == '#' && (c == 0 || s[c - 1] == ' ')) {
        break;  // a comment to the end of the line
      } else if (ch == '{' || ch == '[') {
        open.push_back({l, c, ch});
      } else if ((ch == '}' || ch == ']') && !open.empty()) {
        open.pop_back();
      }
    }
  }
  if (open.empty()) return std::nullopt;
  const Open& o = open.back();
  FlowOpener out;
  out.line = static_cast<int>(o.line) + 1;
  out.column = static_cast<int>(o.column) + 1;
  out.bracket = o.bracket;
  bool item = false;
  std::string key = key_on(lines[o.line].substr(0, o.column), &item);
  out.key_path = block_path(lines, o.line, key, item);
  return out;
}

}  // namespace rdmagw
