import './base.css';
import './submit.css';
