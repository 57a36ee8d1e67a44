/**
 * The panel's tabs (Jobs, GPUs, Submit, Datasets, in that order): an ARIA tablist that the
 * arrow keys move through. A tab is drawn once first opened and kept (hidden) after that,
 * so a half-filled Submit form survives a look at the Jobs tab.
 */
import * as React from 'react';

/** One tab: its id (data-tab), label and content. */
export interface TabSpec {
  id: string;
  label: string;
  render: () => JSX.Element;
}

/** The tab bar and the tabs' panels. */
export function PanelTabs({
  tabs,
  active,
  onSelect
}: {
  tabs: TabSpec[];
  active: string;
  onSelect: (id: string) => void;
}): JSX.Element {
  const visited = React.useRef(new Set<string>());
  visited.current.add(active);
  const buttons = React.useRef<Record<string, HTMLButtonElement | null>>({});

  const onKey = (event: React.KeyboardEvent, index: number): void => {
    const moves: Record<string, number> = {
      ArrowRight: index + 1,
      ArrowLeft: index - 1,
      Home: 0,
      End: tabs.length - 1
    };
    if (!(event.key in moves)) return;
    event.preventDefault();
    const next = tabs[(moves[event.key] + tabs.length) % tabs.length];
    onSelect(next.id);
    buttons.current[next.id]?.focus();
  };

  return (
    <div className="jp-WorkbenchPanel-shell">
      <div className="jp-WorkbenchPanel-tabs" role="tablist" aria-label="Workbench views">
        {tabs.map((tab, i) => (
          <button
            key={tab.id}
            ref={node => {
              buttons.current[tab.id] = node;
            }}
            role="tab"
            id={`jp-WorkbenchPanel-tab-${tab.id}`}
            data-tab={tab.id}
            aria-selected={tab.id === active}
            aria-controls={`jp-WorkbenchPanel-tabpanel-${tab.id}`}
            tabIndex={tab.id === active ? 0 : -1}
            className={`jp-WorkbenchPanel-tab${tab.id === active ? ' jp-mod-current' : ''}`}
            onClick={() => onSelect(tab.id)}
            onKeyDown={e => onKey(e, i)}
          >
            {tab.label}
          </button>
        ))}
      </div>
      {tabs
        .filter(tab => visited.current.has(tab.id))
        .map(tab => (
          <div
            key={tab.id}
            role="tabpanel"
            id={`jp-WorkbenchPanel-tabpanel-${tab.id}`}
            aria-labelledby={`jp-WorkbenchPanel-tab-${tab.id}`}
            className="jp-WorkbenchPanel-tabpanel"
            data-tab={tab.id}
            hidden={tab.id !== active}
          >
            {tab.render()}
          </div>
        ))}
    </div>
  );
}
