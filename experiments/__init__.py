"""The repository's experiments: scripts that probe the papers' claims with the
package's own jobs, and the code behind them (`experiments.study`). Not part of the
installed package; the scripts put the repository root on sys.path to import it."""
